import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { KeysFileError, parseKeysFile, readKeysFile, secretDigest } from '../../src/auth/index.js';

const H1 = secretDigest('secret-one');
const H2 = secretDigest('secret-two');

function problem(text: string): KeysFileError {
  try {
    parseKeysFile('keys.yaml', text);
  } catch (err) {
    assert.ok(err instanceof KeysFileError, String(err));
    return err;
  }
  assert.fail('the file was accepted');
}

test('a YAML file gives each key its grants, found by the hash of its secret', () => {
  const table = parseKeysFile(
    'keys.yaml',
    `keys:
  - name: fraud-service          # a comment
    sha256: ${H1.toUpperCase()}
    scopes: [ "inference:fraud_*", "metadata:fraud_*", "health" ]
  - name: admin
    sha256: ${H2}
    scopes: ["*"]
`,
  );
  const fraud = table.byHash.get(H1)!;
  assert.equal(fraud.name, 'fraud-service');
  assert.ok(fraud.grants.allows('inference', 'fraud_v2'));
  assert.ok(!fraud.grants.allows('inference', 'credit'));
  assert.ok(fraud.grants.allows('health'));
  assert.ok(!fraud.grants.allows('model-repository'));
  assert.ok(table.byHash.get(H2)!.grants.allows('logging'));
  assert.equal(table.byHash.size, 2);
  // Without an anonymous entry, requests without a key get health alone.
  assert.ok(table.anonymous.grants.allows('health'));
  assert.ok(!table.anonymous.grants.allows('metadata'));
  assert.equal(table.anonymousGiven, false);
});

test('a JSON file is read the same way, and an anonymous entry sets what requests without a key get', () => {
  const table = parseKeysFile(
    'keys.json',
    JSON.stringify(
      {
        keys: [
          { name: 'anonymous', scopes: ['metadata', 'health'] },
          { name: 'a', sha256: H1, scopes: ['metrics'] },
        ],
      },
      null,
      2,
    ),
  );
  assert.ok(table.anonymous.grants.allows('metadata', 'anything'));
  assert.ok(!table.anonymous.grants.allows('inference', 'anything'));
  assert.equal(table.anonymousGiven, true);
  assert.ok(table.byHash.get(H1)!.grants.allows('metrics'));
});

test('an empty list is a valid file: only what anonymous gets stays open', () => {
  assert.equal(parseKeysFile('k.yaml', 'keys: []\n').byHash.size, 0);
});

test('each mistake names the file, the line and the field', () => {
  const cases: Array<[string, number, string, RegExp]> = [
    ['keys: [\n  a: b\n}', 3, '', /not valid YAML or JSON/],
    ['{"keys": [}', 1, '', /not valid YAML or JSON/],
    ['- a\n- b\n', 1, '', /expected a mapping with a 'keys' list/],
    ['other: 1\n', 1, 'other', /unknown field/],
    [
      'keys:\n  - name: a\n    sha256: ' +
        H1 +
        '\n    scopes: [health]\n  - name: a\n    sha256: ' +
        H2 +
        '\n    scopes: [health]\n',
      5,
      'keys[1].name',
      /duplicate name 'a' \(first at line 2\)/,
    ],
    [
      'keys:\n  - name: a\n    sha256: abc123\n    scopes: [health]\n',
      3,
      'keys[0].sha256',
      /expected 64 hexadecimal digits.*'abc123' \(6 characters\)/,
    ],
    [
      'keys:\n  - name: a\n    sha256: ' + H1 + '\n    scopes:\n      - health\n      - inferense:x\n',
      6,
      'keys[0].scopes[1]',
      /unknown scope 'inferense:x'/,
    ],
    [
      'keys:\n  - name: a\n    sha256: ' + H1 + '\n    scopes: ["health:x"]\n',
      4,
      'keys[0].scopes[0]',
      /takes no model pattern/,
    ],
    [
      'keys:\n  - name: a\n    sha256: ' + H1 + '\n    scopes: ["inference:"]\n',
      4,
      'keys[0].scopes[0]',
      /empty model pattern/,
    ],
    ['keys:\n  - name: a\n    sha256: ' + H1 + '\n', 2, 'keys[0].scopes', /missing/],
    ['keys:\n  - name: a\n    scopes: [health]\n', 2, 'keys[0].sha256', /missing/],
    ['keys:\n  - sha256: ' + H1 + '\n    scopes: [health]\n', 2, 'keys[0].name', /missing/],
    [
      'keys:\n  - name: a\n    sha256: ' + H1 + '\n    scopes: [health]\n    scope: [x]\n',
      5,
      'keys[0].scope',
      /unknown field/,
    ],
    [
      'keys:\n  - name: a\n    sha256: ' +
        H1 +
        '\n    scopes: [health]\n  - name: b\n    sha256: ' +
        H1 +
        '\n    scopes: [health]\n',
      6,
      'keys[1].sha256',
      /the same secret as key 'a'/,
    ],
    [
      'keys:\n  - name: anonymous\n    sha256: ' + H1 + '\n    scopes: [health]\n',
      3,
      'keys[0].sha256',
      /has no secret/,
    ],
    ['keys:\n  - name: "a b"\n    sha256: ' + H1 + '\n    scopes: [health]\n', 2, 'keys[0].name', /not a key name/],
    ['keys:\n  - name: a\n    sha256: ' + H1 + '\n    scopes: health\n', 4, 'keys[0].scopes', /expected a list/],
    [
      'keys:\n  - name: a\n    sha256: ' + H1 + '\n    scopes: [7]\n',
      4,
      'keys[0].scopes[0]',
      /expected a string, got 7/,
    ],
    ['keys: 3\n', 1, 'keys', /expected a list of keys/],
    ['', 1, '', /expected a mapping/],
  ];
  for (const [text, line, field, why] of cases) {
    const err = problem(text);
    assert.equal(err.file, 'keys.yaml', text);
    assert.equal(err.line, line, `${text}\n-> ${err.message}`);
    assert.equal(err.field, field, `${text}\n-> ${err.message}`);
    assert.match(err.why, why, text);
    assert.ok(err.message.startsWith(`keys.yaml:${line}: `), err.message);
  }
});

test('a hash of digits alone, which YAML reads as a number, is taken as written', () => {
  const digits = '1'.repeat(64);
  const table = parseKeysFile('k.yaml', `keys:\n  - name: a\n    sha256: ${digits}\n    scopes: [health]\n`);
  assert.equal(table.byHash.get(digits)?.name, 'a');
});

test('a missing file is an error naming it', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-keys-'));
  const file = path.join(dir, 'absent.yaml');
  assert.throws(
    () => readKeysFile(file),
    (err: unknown) => err instanceof KeysFileError && err.message.startsWith(`${file}:1: cannot read`),
  );
  writeFileSync(path.join(dir, 'k.yaml'), `keys:\n  - name: a\n    sha256: ${H1}\n    scopes: [health]\n`);
  assert.equal(readKeysFile(path.join(dir, 'k.yaml')).byHash.size, 1);
});
