/**
 * Relative links in Markdown files: every `[text](target)` outside code
 * blocks whose target is a path in the repository must name a file or
 * folder that exists, and a `#fragment` must name a heading of the Markdown
 * file it points into, by GitHub's rule for heading anchors.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens, repeats numbered. */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const counts = new Map<string, number>();
  for (const line of withoutFences(markdown).split('\n')) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const text = m[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1');
    const base = text.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/ /g, '-');
    const n = counts.get(base) ?? 0;
    counts.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
}

/** The text with fenced code blocks and inline code spans blanked out (links there are not links). */
function withoutCode(markdown: string): string {
  return withoutFences(markdown).replace(/`[^`\n]*`/g, '');
}

/** Every relative link of one Markdown file that does not resolve, as `file: target (why)`. */
export function brokenLinks(file: string, root: string): string[] {
  const text = readFileSync(file, 'utf8');
  const broken: string[] = [];
  const where = path.relative(root, file);
  for (const m of withoutCode(text).matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const target = m[1]!;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: ...
    const [pathPart, fragment] = target.split('#', 2) as [string, string | undefined];
    const resolved = pathPart === '' ? file : path.resolve(path.dirname(file), decodeURIComponent(pathPart));
    if (!resolved.startsWith(root + path.sep) && resolved !== root) {
      broken.push(`${where}: ${target} (leaves the repository)`);
      continue;
    }
    if (!existsSync(resolved)) {
      broken.push(`${where}: ${target} (no such file)`);
      continue;
    }
    if (fragment === undefined) continue;
    if (statSync(resolved).isDirectory() || !resolved.endsWith('.md')) {
      broken.push(`${where}: ${target} (an anchor into something that is not a Markdown file)`);
      continue;
    }
    if (!headingAnchors(readFileSync(resolved, 'utf8')).has(fragment)) {
      broken.push(`${where}: ${target} (no heading with that anchor)`);
    }
  }
  return broken;
}
