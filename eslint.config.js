// ESLint (flat config): the recommended rules of ESLint and typescript-eslint, and lines of at most 120
// characters. `npm run lint` runs it, and `npm test` runs that first.
import js from '@eslint/js';
import stylistic from '@stylistic/eslint-plugin';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'src/gen/', '.tools/', 'bench/models/'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    plugins: { '@stylistic': stylistic },
    rules: {
      '@stylistic/max-len': ['error', { code: 120, tabWidth: 2 }],
      // TypeScript checks fall-through itself (noFallthroughCasesInSwitch) and knows which calls never return.
      'no-fallthrough': 'off',
      // `let [a, b] = …` where only a is reassigned stays one declaration.
      'prefer-const': ['error', { destructuring: 'all' }],
      // A leading underscore marks a parameter or binding kept on purpose (a signature, a rest sibling).
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          ignoreRestSiblings: true,
        },
      ],
    },
  },
  {
    // The dashboard's page script runs in the browser, beside uPlot's bundle.
    files: ['src/frontends/dashboard/static/**/*.js'],
    languageOptions: { globals: { ...globals.browser, uPlot: 'readonly' }, sourceType: 'script' },
  },
);
