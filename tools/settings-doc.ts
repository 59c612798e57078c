// `npm run docs:settings`: writes the settings table of docs/settings.md, between its markers, from
// the declarations in shared/config/settings.ts. test/settings-doc.test.ts fails while the
// committed table differs from what this writes.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { SETTINGS, type Setting } from '../shared/config/index.js';

export const SETTINGS_DOC = fileURLToPath(new URL('../docs/settings.md', import.meta.url));
const BEGIN =
  '<!-- settings table: written by `npm run docs:settings` from shared/config/settings.ts; edit it there -->';
const END = '<!-- end of settings table -->';

/** One row per setting, in the order declared: the variable and its flag, the default, the doc. */
export function settingsTable(settings: Record<string, Setting<unknown>> = SETTINGS): string {
  const cell = (text: string) => text.replace(/\|/g, '\\|');
  const rows = Object.values(settings).map((s) => {
    const name = `\`${s.env}\`${s.flag === undefined ? '' : ` [\`--${s.flag}\`]`}`;
    return `| ${cell(name)} | ${cell(s.shown ?? s.parse.shown)} | ${cell(s.doc)} |`;
  });
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n');
}

/** The document with the table between its markers replaced by `table`. */
export function withSettingsTable(doc: string, table = settingsTable()): string {
  const begin = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  if (begin < 0 || end < begin)
    throw new Error(`docs/settings.md has lost its markers: put back ${BEGIN} and ${END} around the table`);
  return `${doc.slice(0, begin + BEGIN.length)}\n${table}\n${doc.slice(end)}`;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  const doc = readFileSync(SETTINGS_DOC, 'utf8');
  const next = withSettingsTable(doc);
  writeFileSync(SETTINGS_DOC, next);
  console.log(
    next === doc ? 'docs/settings.md: the settings table was up to date' : 'docs/settings.md: settings table written',
  );
}
