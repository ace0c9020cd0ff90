#!/usr/bin/env node
/** The `nereid` command: serve, perf, validate, keys. */
import { applyAllocatorTuning } from './allocator.js';

const USAGE = `Usage: nereid <command> [flags]

Commands:
  serve      serve a Triton model repository (tritonserver's flags)
  perf       measure a model under load (perf_analyzer's flags)
  validate   check the config.pbtxt files of a model repository
  keys       create an API key for --auth-keys (keys create --name NAME --scopes ...)

Run 'nereid <command> --help' for a command's flags.
`;

/** Serving starts with the allocator tuned (which may re-execute this process), before the server's modules load. */
async function serve(argv: string[]): Promise<number> {
  const allocator = argv.includes('--help') || argv.includes('-h') ? [] : applyAllocatorTuning();
  const { runServe } = await import('./serve.js');
  return runServe(argv, allocator);
}

/** Node 20 is past its end of life; see docs/deployment.md ("Node.js versions"). */
function unsupportedNode(): string | undefined {
  const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
  if (major >= 24 || (major === 22 && minor >= 15)) return undefined;
  return `error: Node.js v${process.versions.node} is not supported: install Node.js 24 (or 22.15 or later), ` +
    `or from a clone run 'npm start', which fetches Node 24 into .tools/\n`;
}

async function main(argv: string[]): Promise<number> {
  const unsupported = unsupportedNode();
  if (unsupported !== undefined) {
    process.stderr.write(unsupported);
    return 1;
  }
  const [command, ...rest] = argv;
  switch (command) {
    case 'serve':
      return serve(rest);
    case 'perf': {
      const { runPerf } = await import('./perf/index.js');
      return runPerf(rest);
    }
    case 'validate': {
      const { runValidate } = await import('./validate.js');
      return runValidate(rest);
    }
    case 'keys': {
      const { runKeys } = await import('./keys.js');
      return runKeys(rest);
    }
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      process.stdout.write(USAGE);
      return command === undefined ? 2 : 0;
    default:
      // tritonserver habits: `nereid --model-repository=...` means serve.
      if (command.startsWith('--')) return serve(argv);
      process.stderr.write(`error: unknown command '${command}'\n${USAGE}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // Let pending log writes flush, then leave even if a handle lingers.
    setTimeout(() => process.exit(code), 200).unref();
  },
  (err) => {
    process.stderr.write(`error: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
