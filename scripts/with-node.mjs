// `node scripts/with-node.mjs [--node=22] FILE ARGS...` is `node FILE ARGS...` under a supported Node.js:
// the machine's own when it is one, else a pinned Node 24 fetched into .tools/ (scripts/supported-node.mjs).
// --node=22 runs under the pinned Node 22 instead (the smoke run of the lowest supported line).
import { PINNED, fetchNode, runUnder, supportedNode } from './supported-node.mjs';

const args = process.argv.slice(2);
let node;
if (args[0]?.startsWith('--node=')) {
  const major = args.shift().slice('--node='.length);
  if (!(major in PINNED)) {
    console.error(`with-node: --node=${major}: the pinned versions are ${Object.keys(PINNED).join(', ')}`);
    process.exit(2);
  }
  node = fetchNode(PINNED[major]);
} else {
  node = supportedNode();
}
if (args.length === 0) {
  console.error('usage: node scripts/with-node.mjs [--node=22] FILE [ARGS...]');
  process.exit(2);
}
const machineNode = process.env.NEREID_MACHINE_NODE ?? process.execPath;
const env = node === process.execPath ? {} : { NEREID_MACHINE_NODE: machineNode };
process.exit(await runUnder(node, args, { env }));
