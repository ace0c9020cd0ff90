/**
 * The dashboard in a real browser (Debian's Chromium, driven by
 * playwright-core) against `nereid serve` on the example repository: the
 * table lists every model, charts move under load, the buttons unload and
 * load a model, the page works with keys, in a narrow window and from the
 * keyboard, with no error in the console. A screenshot of each test is kept
 * under test-artifacts/dashboard/.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type Page, chromium } from 'playwright-core';
import { createKey } from '../../../src/auth/index.js';
import { LOOPBACK_PORTS, startServe, type ServeProcess } from '../../helpers/serve-process.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
const EXAMPLES = path.join(ROOT, 'examples', 'model_repository');
const ARTIFACTS = path.join(ROOT, 'test-artifacts', 'dashboard');
const CHROMIUM = process.env['NEREID_CHROMIUM'] ?? '/usr/bin/chromium';

const ONES = Array.from({ length: 16 }, () => 1);
const INFER = JSON.stringify({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: ONES },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: ONES },
  ],
});

async function launch(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (scripts/system-deps.sh)`);
  }
  return chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
}

/** A page that records console errors and uncaught exceptions. */
async function openPage(browser: Browser, url: string, width = 1280): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  return { page, errors };
}

async function shot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

type IndexEntry = { name: string; state: string };

async function indexOf(port: number, headers: Record<string, string> = {}): Promise<IndexEntry[]> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/repository/index`, { method: 'POST', headers, body: '{}' });
  assert.equal(r.status, 200);
  return (await r.json()) as IndexEntry[];
}

describe('the dashboard in Chromium', () => {
  let browser: Browser;
  let serve: ServeProcess;
  let http: number;

  before(async () => {
    browser = await launch();
    serve = startServe([
      ...LOOPBACK_PORTS,
      `--model-repository=${EXAMPLES}`,
      '--model-control-mode=explicit',
      '--load-model=*',
    ]);
    http = (await serve.ports).http;
  });
  after(async () => {
    await browser?.close();
    await serve?.stop();
  });

  test('the table lists every model of the repository, without console errors', async () => {
    const { page, errors } = await openPage(browser, `http://127.0.0.1:${http}/dashboard`);
    const names = [...new Set((await indexOf(http)).map((e) => e.name))];
    await page.waitForFunction(`document.querySelectorAll('#models tr').length === ${names.length}`);
    const shown = (await page.evaluate(
      `[...document.querySelectorAll('#models tr')].map((r) => r.dataset.model)`,
    )) as string[];
    assert.deepEqual([...new Set(shown)].sort(), [...new Set(names)].sort());
    assert.match((await page.textContent('#server')) ?? '', /live.*ready/);
    await shot(page, 'table');
    assert.deepEqual(errors, []);
    await page.close();
  });

  test('charts move under load', async () => {
    const { page, errors } = await openPage(browser, `http://127.0.0.1:${http}/dashboard`);
    await page.click('#models tr[data-model="simple"] td:first-child button');
    const deadline = Date.now() + 20_000;
    let moved = false;
    while (!moved && Date.now() < deadline) {
      await Promise.all(
        Array.from({ length: 20 }, () =>
          fetch(`http://127.0.0.1:${http}/v2/models/simple/infer`, { method: 'POST', body: INFER }),
        ),
      );
      moved = (await page.evaluate(`(() => {
        const last = JSON.parse(document.getElementById('chart-rps')?.dataset.last ?? '[]');
        const lat = JSON.parse(document.getElementById('chart-latency')?.dataset.last ?? '[]');
        return (last[0] ?? 0) > 0 && (lat[0] ?? 0) > 0;
      })()`)) as boolean;
    }
    assert.ok(moved, 'the requests/s and latency charts show the load');
    const rps = await page.textContent('#models tr[data-model="simple"] td.rps');
    assert.ok(Number((rps ?? '0').replace(/,/g, '')) > 0, `requests/s cell: ${rps}`);
    await shot(page, 'load');
    assert.deepEqual(errors, []);
    await page.close();
  });

  test('the unload and load buttons change the model, with the result shown', async () => {
    const { page, errors } = await openPage(browser, `http://127.0.0.1:${http}/dashboard`);
    const row = '#models tr[data-model="simple"]';
    await page.click(`${row} button[data-action="unload"]`);
    await page.waitForFunction(`document.getElementById('status').textContent === 'unload simple: done'`);
    assert.equal((await indexOf(http)).find((e) => e.name === 'simple')?.state, 'UNAVAILABLE');
    await page.waitForSelector(`${row} .state-UNAVAILABLE`);
    await shot(page, 'unloaded');
    await page.click(`${row} button[data-action="load"]`);
    await page.waitForFunction(`document.getElementById('status').textContent === 'load simple: done'`);
    assert.equal((await indexOf(http)).find((e) => e.name === 'simple')?.state, 'READY');
    await page.waitForSelector(`${row} .state-READY`);
    assert.deepEqual(errors, []);
    await page.close();
  });

  test('a narrow window keeps the page inside it, and the keyboard selects a model', async () => {
    const { page, errors } = await openPage(browser, `http://127.0.0.1:${http}/dashboard`, 380);
    await page.waitForSelector('#models tr[data-model="fraud_detector"]');
    const overflow = (await page.evaluate('document.documentElement.scrollWidth - window.innerWidth')) as number;
    assert.ok(overflow <= 0, `the page is ${overflow} px wider than the window`);
    await page.focus('#models tr[data-model="fraud_detector"] td:first-child button');
    await page.keyboard.press('Enter');
    await page.waitForFunction(`document.getElementById('chart-title').textContent.includes('fraud_detector')`);
    await shot(page, 'narrow');
    assert.deepEqual(errors, []);
    await page.close();
  });
});

describe('the dashboard with keys', () => {
  let browser: Browser;
  let serve: ServeProcess;
  let http: number;
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-dashboard-keys-'));
  const operator = createKey('operator', ['metadata', 'model-repository', 'health']);

  before(async () => {
    const file = path.join(dir, 'keys.yaml');
    writeFileSync(file, `keys:\n${operator.entry}`);
    browser = await launch();
    serve = startServe([
      ...LOOPBACK_PORTS,
      `--model-repository=${EXAMPLES}`,
      '--model-control-mode=explicit',
      '--load-model=simple',
      `--auth-keys=${file}`,
    ]);
    http = (await serve.ports).http;
  });
  after(async () => {
    await browser?.close();
    await serve?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('without a key the page asks for one; with it the table fills', async () => {
    const { page } = await openPage(browser, `http://127.0.0.1:${http}/dashboard`);
    await page.waitForSelector('#auth:not([hidden])');
    assert.equal(await page.locator('#models tr').count(), 0);
    const state = await fetch(`http://127.0.0.1:${http}/dashboard/api/state`);
    assert.equal(state.status, 401);
    await page.fill('#auth-key', operator.secret);
    await page.click('#auth-form button');
    await page.waitForSelector('#models tr[data-model="simple"]');
    await page.waitForSelector('#auth', { state: 'hidden' });
    await shot(page, 'keys');
    await page.close();
  });
});
