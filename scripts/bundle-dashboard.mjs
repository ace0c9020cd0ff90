// Bundles the dashboard's static files and uPlot (a devDependency) into dist/, so the server serves
// them from its own folder: nothing is fetched or built when it starts.
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const from = path.join(root, 'src', 'frontends', 'dashboard', 'static');
const to = path.join(root, 'dist', 'src', 'frontends', 'dashboard', 'static');
mkdirSync(to, { recursive: true });
for (const name of readdirSync(from)) copyFileSync(path.join(from, name), path.join(to, name));
const require = createRequire(import.meta.url);
const uplot = path.dirname(require.resolve('uplot/package.json'));
copyFileSync(path.join(uplot, 'dist', 'uPlot.iife.min.js'), path.join(to, 'uplot.js'));
copyFileSync(path.join(uplot, 'dist', 'uPlot.min.css'), path.join(to, 'uplot.css'));
copyFileSync(path.join(uplot, 'LICENSE'), path.join(to, 'uplot.LICENSE'));
