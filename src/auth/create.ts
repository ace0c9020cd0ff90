/** A new key for `nereid keys create`: a random secret and the keys-file entry that holds only its hash. */
import { randomBytes } from 'node:crypto';
import { stringify } from 'yaml';
import { secretDigest } from './access.js';
import { ANONYMOUS, keyNameProblem } from './keys-file.js';
import { Grants, ScopeError } from './scopes.js';

/** Secrets are `nrd_` and 32 random bytes in base64url: 256 bits, safe in a header and a shell. */
const SECRET_PREFIX = 'nrd_';

export interface CreatedKey {
  readonly secret: string;
  /** The entry to add under `keys:`, as YAML list item text. */
  readonly entry: string;
}

/** Throws Error with what is wrong in the name or a scope. */
export function createKey(name: string, scopes: readonly string[]): CreatedKey {
  const problem = keyNameProblem(name);
  if (problem !== undefined) throw new Error(problem);
  if (name === ANONYMOUS)
    throw new Error(`'${ANONYMOUS}' is what requests without a key get; it has no secret (add its entry by hand)`);
  if (scopes.length === 0) throw new Error('give the key at least one scope, e.g. --scopes=inference:my_model,health');
  try {
    new Grants(scopes);
  } catch (err) {
    if (err instanceof ScopeError) throw new Error(err.message, { cause: err });
    throw err;
  }
  const secret = SECRET_PREFIX + randomBytes(32).toString('base64url');
  const entry = stringify([{ name, sha256: secretDigest(secret), scopes: [...scopes] }], {
    flowCollectionPadding: true,
    defaultStringType: 'PLAIN',
  });
  return { secret, entry };
}
