// A whole-number setting is read as strictly as the HTTP API and the CLI's flags read numbers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, intValue } from '../shared/config/values.js';

test('settings: a whole number is plain decimal digits; hex, binary, octal, exponents, dots and spaces are refused', () => {
  for (const raw of ['0x10', '0b11', '0o17', '1e3', '12.', '12.0', ' 12', '12 ', '+12', '-1', '012', 'eighty']) {
    assert.throws(
      () => intValue('PORT', raw, 3000, 0),
      (err: unknown) =>
        err instanceof ConfigError && err.message === `PORT must be an integer >= 0, got ${JSON.stringify(raw)}`,
      raw,
    );
  }
  assert.throws(() => intValue('MAX_INFLIGHT', '0', 50, 1), /MAX_INFLIGHT must be an integer >= 1, got "0"/);
  assert.equal(intValue('PORT', '16', 3000, 0), 16);
  assert.equal(intValue('PORT', '0', 3000, 0), 0);
  assert.equal(intValue('PORT', 16, 3000, 0), 16, 'a flag yargs already read as a number');
  assert.equal(intValue('PORT', '', 3000, 0), 3000, 'empty is unset');
  assert.equal(intValue('PORT', undefined, 3000, 0), 3000);
});
