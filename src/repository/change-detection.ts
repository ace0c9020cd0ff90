/**
 * Change detection for polling: a fingerprint of a model folder (every path,
 * size and modification time), so a poll can tell a changed model from an
 * unchanged one without reading file contents.
 */
import { createHash } from 'node:crypto';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';

/** A digest of the folder's tree: paths, sizes and modification times. Missing entries are skipped. */
export async function fingerprintDir(dir: string): Promise<string> {
  const hash = createHash('sha1');
  const walk = async (d: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch {
      return;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const e of entries) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) {
        hash.update(`d:${p}\n`);
        await walk(p);
      } else {
        try {
          const s = await stat(p);
          hash.update(`f:${p}:${s.size}:${s.mtimeMs}\n`);
        } catch {
          // vanished while scanning
        }
      }
    }
  };
  await walk(dir);
  return hash.digest('hex');
}
