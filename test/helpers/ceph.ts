/**
 * A throwaway single-node Ceph cluster with radosgw (a real S3 server) for
 * tests and benchmarks: one monitor without auth, one memstore OSD, radosgw
 * on 127.0.0.1 and a free port, and one S3 user. Everything runs in its own
 * process group under a temporary folder and goes away with `stop()`.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { CreateBucketCommand, PutObjectCommand, DeleteObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { freePort, missingTools, run, spawnGroup, stopGroup, waitFor } from './processes.js';

export const CEPH_TOOLS = ['ceph-mon', 'ceph-osd', 'radosgw', 'radosgw-admin', 'monmaptool', 'ceph'];

export interface RadosGateway {
  /** `http://127.0.0.1:PORT` */
  readonly endpoint: string;
  /** `127.0.0.1:PORT`, as Triton's s3://host:port/bucket URLs want it. */
  readonly hostPort: string;
  readonly accessKey: string;
  readonly secretKey: string;
  /** A client with the user's keys. */
  readonly client: S3Client;
  createBucket(bucket: string): Promise<void>;
  /** Uploads every file under `localDir` to `bucket` under `prefix`. */
  uploadDir(localDir: string, bucket: string, prefix: string): Promise<number>;
  put(bucket: string, key: string, body: Uint8Array | string): Promise<void>;
  remove(bucket: string, key: string): Promise<void>;
  stop(): Promise<void>;
}

/** Why the cluster cannot run here (outside CI), or undefined; throws in CI. */
export function radosGatewayUnavailable(): string | undefined {
  return missingTools(CEPH_TOOLS);
}

/**
 * Starts the cluster. A start that stalls (on a loaded machine the OSD now
 * and then never comes up) is torn down and tried again with fresh ports.
 */
export async function startRadosGateway(attempts = 3): Promise<RadosGateway> {
  for (let i = 1; ; i++) {
    try {
      return await startOnce();
    } catch (err) {
      if (i >= attempts) throw err;
      process.stderr.write(
        `radosgw start ${i} of ${attempts} failed, retrying: ${(err as Error).message.split('\n')[0]}\n`,
      );
    }
  }
}

async function startOnce(): Promise<RadosGateway> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-ceph-'));
  for (const d of ['run', 'log', 'mon', 'osd/0', 'rgw']) mkdirSync(path.join(dir, d), { recursive: true });
  const monPort = await freePort();
  let rgwPort = await freePort();
  while (rgwPort === monPort) rgwPort = await freePort();
  const fsid = randomUUID();
  const conf = path.join(dir, 'ceph.conf');
  writeFileSync(
    conf,
    `[global]
fsid = ${fsid}
mon host = v1:127.0.0.1:${monPort}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv4 = true
ms bind ipv6 = false
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
osd class update on start = false
osd crush update on start = false
osd objectstore = memstore
memstore device bytes = 1073741824
run dir = ${dir}/run
admin socket = ${dir}/run/$name.asok
log file = ${dir}/log/$name.log
pid file = ${dir}/run/$name.pid
mon data = ${dir}/mon/$id
osd data = ${dir}/osd/$id
keyring = ${dir}/keyring
rgw frontends = beast endpoint=127.0.0.1:${rgwPort}
rgw data = ${dir}/rgw
`,
  );
  writeFileSync(path.join(dir, 'keyring'), '');
  const children: ChildProcess[] = [];
  const stopAll = async (): Promise<void> => {
    // radosgw first, the monitor last: the others talk to it while exiting.
    for (const child of [...children].reverse()) await stopGroup(child);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const monmap = path.join(dir, 'monmap');
    await run('monmaptool', ['--create', '--addv', 'a', `[v1:127.0.0.1:${monPort}]`, '--fsid', fsid, monmap]);
    await run('ceph-mon', ['-c', conf, '--mkfs', '-i', 'a', '--monmap', monmap]);
    children.push(spawnGroup('ceph-mon', ['-c', conf, '-i', 'a', '-f']));
    const osdUuid = randomUUID();
    await run('ceph', ['-c', conf, '--connect-timeout', '30', 'osd', 'new', osdUuid]);
    // The OSD is placed in the CRUSH map here rather than by itself at start:
    // Ceph 16's OSD sends that update before it has the monitor map, now and
    // then with a zero cluster fsid, and the monitor's 'wrong fsid' refusal
    // leaves it never coming up.
    await run('ceph', ['-c', conf, '--connect-timeout', '30', 'osd', 'crush', 'add', 'osd.0', '1.0', 'root=default']);
    await run('ceph-osd', ['-c', conf, '-i', '0', '--mkfs', '--osd-uuid', osdUuid]);
    children.push(spawnGroup('ceph-osd', ['-c', conf, '-i', '0', '-f']));
    // Pools can only be created once the OSD is up and in.
    await waitFor('the OSD to come up', async () => {
      const stat = JSON.parse(
        await run('ceph', ['-c', conf, '--connect-timeout', '10', 'osd', 'stat', '--format', 'json']),
      ) as {
        num_up_osds?: number;
        num_in_osds?: number;
      };
      return stat.num_up_osds === 1 && stat.num_in_osds === 1;
    }, 30_000);
    const accessKey = 'NEREIDTESTACCESSKEY';
    const secretKey = 'nereid-test-secret-key';
    await run(
      'radosgw-admin',
      [
        '-c',
        conf,
        'user',
        'create',
        '--uid=test',
        '--display-name=test',
        `--access-key=${accessKey}`,
        `--secret=${secretKey}`,
      ],
      60_000,
    );
    children.push(spawnGroup('radosgw', ['-c', conf, '-n', 'client.rgw.a', '-f']));
    const endpoint = `http://127.0.0.1:${rgwPort}`;
    await waitFor('radosgw to answer', async () => (await fetch(endpoint)).ok, 60_000);
    const client = new S3Client({
      endpoint,
      forcePathStyle: true,
      region: 'us-east-1',
      credentials: { accessKeyId: accessKey, secretAccessKey: secretKey },
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    });
    const put = async (bucket: string, key: string, body: Uint8Array | string): Promise<void> => {
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
    };
    return {
      endpoint,
      hostPort: `127.0.0.1:${rgwPort}`,
      accessKey,
      secretKey,
      client,
      createBucket: async (bucket) => {
        await client.send(new CreateBucketCommand({ Bucket: bucket }));
      },
      uploadDir: async (localDir, bucket, prefix) => {
        const files = walk(localDir);
        await Promise.all(files.map((f) => put(bucket, joinKey(prefix, f), readFileSync(path.join(localDir, f)))));
        return files.length;
      },
      put,
      remove: async (bucket, key) => {
        await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
      },
      stop: async () => {
        client.destroy();
        await stopAll();
      },
    };
  } catch (err) {
    const logs = logTails(path.join(dir, 'log'));
    await stopAll();
    throw new Error(`${(err as Error).message}\n${logs}`, { cause: err });
  }
}

/** The last lines of each daemon log, for a start that failed. */
function logTails(logDir: string): string {
  try {
    return readdirSync(logDir)
      .map((f) => `--- ${f}\n${readFileSync(path.join(logDir, f), 'utf8').split('\n').slice(-15).join('\n')}`)
      .join('\n');
  } catch {
    return '';
  }
}

/** Relative paths of every file under `root`, '/'-separated. */
export function walk(root: string, rel = ''): string[] {
  const out: string[] = [];
  for (const name of readdirSync(path.join(root, rel))) {
    const r = rel ? `${rel}/${name}` : name;
    if (statSync(path.join(root, r)).isDirectory()) out.push(...walk(root, r));
    else out.push(r);
  }
  return out.sort();
}

export function joinKey(prefix: string, rel: string): string {
  return prefix ? `${prefix.replace(/\/+$/, '')}/${rel}` : rel;
}
