// docs/settings.md's table is the one shared/config/settings.ts declares: a setting added, renamed,
// re-defaulted or re-documented without `npm run docs:settings` fails here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { SETTINGS, type Setting } from '../shared/config/index.js';
import { settingsTable, SETTINGS_DOC, withSettingsTable } from '../tools/settings-doc.js';

const committed = () => readFileSync(SETTINGS_DOC, 'utf8');
const rowsOf = (doc: string, env: string) => doc.split('\n').filter((line) => line.startsWith(`| \`${env}\``));

test('settings doc: the committed table is the one the declarations generate (npm run docs:settings)', () => {
  const doc = committed();
  assert.equal(
    doc,
    withSettingsTable(doc),
    'docs/settings.md differs from shared/config/settings.ts: run npm run docs:settings',
  );
});

test('settings doc: each declared setting has one row, its flag, default and doc as an operator reads them', () => {
  const doc = committed();
  for (const s of Object.values(SETTINGS) as Setting<unknown>[]) assert.equal(rowsOf(doc, s.env).length, 1, s.env);
  // Spelled out, so the generator is checked against the text and not only against itself.
  assert.deepEqual(rowsOf(doc, 'PORT'), ['| `PORT` [`--port`] | `3000` | API listen port |']);
  assert.deepEqual(rowsOf(doc, 'REPLAY_INTERVAL_SECONDS'), [
    '| `REPLAY_INTERVAL_SECONDS` [`--interval`] | `5` | replay cadence (1-59 s, or whole minutes) |',
  ]);
  assert.deepEqual(rowsOf(doc, 'JWT_REQUIRE_EXP'), [
    '| `JWT_REQUIRE_EXP` | `true` (`false` in development) | refuse tokens without `exp` |',
  ]);
  assert.deepEqual(
    rowsOf(doc, 'PURCHASE_RATE_PER_IP').map((row) => row.split(' | ')[1]),
    ['`0` (off)'],
  );
  assert.deepEqual(rowsOf(doc, 'WRITER_BATCH_SIZE'), [
    '| `WRITER_BATCH_SIZE` [`--batch-size`] | `1000` | winners per Postgres round trip |',
  ]);
});

test('settings doc: every default the table shows in code is the value an unset setting takes', () => {
  let checked = 0;
  for (const s of Object.values(SETTINGS) as Setting<unknown>[]) {
    const shown = /^`([^`]*)`/.exec(s.shown ?? s.parse.shown)?.[1];
    // None, or a placeholder worked out at start (WRITER_ID's host and pid).
    if (shown === undefined || shown.includes('<')) continue;
    const value = s.parse(undefined, s.env, { development: false, env: {} });
    // Words for booleans where the variable takes words: DIRECT_PAY is on/off, FLASHSALE_LOCAL_STACK 0/1.
    const spelled =
      typeof value === 'boolean' ? [String(value), value ? 'on' : 'off', value ? '1' : '0'] : [String(value)];
    assert.ok(spelled.includes(shown), `${s.env}: the table shows ${shown}, unset gives ${String(value)}`);
    checked++;
  }
  assert.ok(checked >= 30, `defaults checked: ${checked}`);
});

test('settings doc: a stale table is caught, and writing it again restores the declared one', () => {
  // From the generated text, so that this checks the check itself whatever state the committed file is in.
  const doc = withSettingsTable(committed());
  const edited = doc.replace('| `PORT` [`--port`] | `3000` |', '| `PORT` [`--port`] | `8080` |');
  assert.notEqual(edited, doc);
  assert.notEqual(withSettingsTable(edited), edited, 'an edited row must not pass for the generated one');
  assert.equal(withSettingsTable(edited), doc);

  // A setting declared but not yet written into the doc (another branch adding one) fails the same check.
  const added: Record<string, Setting<unknown>> = {
    ...SETTINGS,
    legacyBuyCounts: { ...SETTINGS.localStack, env: 'LEGACY_BUY_COUNTS', doc: 'added later' },
  };
  assert.notEqual(withSettingsTable(doc, settingsTable(added)), doc);
  assert.match(settingsTable(added), /^\| `LEGACY_BUY_COUNTS` \| `0` \| added later \|$/m);

  assert.throws(() => withSettingsTable(doc.replace('<!-- end of settings table -->', '')), /lost its markers/);
});
