/**
 * `nereid keys create --name NAME --scopes SCOPE[,SCOPE...]`: makes a new
 * random secret, prints it once, and prints the entry to add to the
 * `--auth-keys` file (which holds only the secret's SHA-256).
 */
import { API_GROUPS, MODEL_GROUPS, createKey } from '../auth/index.js';
import { FlagReader, parseFlags } from './flags.js';

export const KEYS_HELP = `Usage: nereid keys create --name NAME --scopes SCOPE[,SCOPE...]

Prints a new random secret (once: it is stored nowhere) and the entry to add
under 'keys:' in the --auth-keys file. Clients send the secret as
'Authorization: Bearer <secret>' (HTTP) or in the gRPC metadata 'authorization'.

Scopes: ${API_GROUPS.join(', ')}, or * for everything.
${[...MODEL_GROUPS].join(', ')} take a model pattern after a colon
(* and ? globs), e.g. inference:fraud_* metadata:fraud_*.
`;

export function runKeys(argv: readonly string[]): number {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || rest.includes('--help')) {
    process.stdout.write(KEYS_HELP);
    return command === undefined ? 2 : 0;
  }
  if (command !== 'create') {
    process.stderr.write(`error: unknown keys command '${command}' (only 'create')\n${KEYS_HELP}`);
    return 2;
  }
  let name: string | undefined;
  let scopes: string[];
  try {
    const f = new FlagReader(parseFlags(rest, { name: { type: 'string' }, scopes: { type: 'string', repeat: true } }));
    name = f.string('name');
    scopes = f.all('scopes').flatMap((s) => s.split(',')).map((s) => s.trim()).filter((s) => s !== '');
  } catch (err) {
    process.stderr.write(`error: ${(err as Error).message}\n`);
    return 2;
  }
  if (name === undefined) {
    process.stderr.write('error: --name is required (shown in logs and metrics, never the secret)\n');
    return 2;
  }
  let created: ReturnType<typeof createKey>;
  try {
    created = createKey(name, scopes);
  } catch (err) {
    process.stderr.write(`error: ${(err as Error).message}\n`);
    return 2;
  }
  process.stdout.write(
    `Secret for '${name}' (shown this once; give it to the client, it is stored nowhere):\n\n` +
      `  ${created.secret}\n\n` +
      `Add this entry under 'keys:' in the --auth-keys file:\n\n` +
      created.entry.trimEnd().replace(/^/gm, '  ') +
      '\n\n',
  );
  return 0;
}
