// Rewrites every JavaScript file under a node_modules folder without its whitespace and comments
// (licence comments stay) and with shorter equivalent syntax, keeping every name and each file's
// module format, so nothing that reads a function's or class's name changes. Run by
// deploy/image-layout.sh: it takes the image's dependencies from 86 to 73 MB (docs/deployment.md).
//   node deploy/minify-modules.mjs DIR/node_modules
import { lstatSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// esbuild is a devDependency of this repository, not of the layout being pruned.
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { transformSync } = createRequire(path.join(root, 'package.json'))('esbuild');

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node deploy/minify-modules.mjs DIR/node_modules');
  process.exit(2);
}
const OPTIONS = { loader: 'js', minifyWhitespace: true, minifySyntax: true, legalComments: 'inline', charset: 'utf8' };
let before = 0;
let after = 0;
const kept = [];
function walk(d) {
  for (const name of readdirSync(d)) {
    const p = path.join(d, name);
    const st = lstatSync(p);
    if (st.isDirectory()) walk(p);
    else if (st.isFile() && /\.[cm]?js$/.test(name)) {
      const src = readFileSync(p, 'utf8');
      let out;
      try {
        out = transformSync(src, OPTIONS).code;
      } catch {
        kept.push(path.relative(dir, p)); // not parsable as a script or module on its own: left as it is
        continue;
      }
      if (out.length >= src.length) continue;
      writeFileSync(p, out);
      before += src.length;
      after += out.length;
    }
  }
}
walk(dir);
const mb = (n) => (n / 1e6).toFixed(1);
const left = kept.length ? `; ${kept.length} file(s) left as they were` : '';
console.log(`minified JavaScript in ${dir}: ${mb(before)} -> ${mb(after)} MB${left}`);
