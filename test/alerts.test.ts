// The monitoring files in deploy/ as CI sees them: promtool checks the rules and the scrape config
// and runs the rules' unit tests; every alert is complete and tested both ways; the rules and the
// Grafana board name only series this product exports.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { registry } from '../shared/runtime/metrics.js';
import { DEPLOY, promtool } from './support/prometheus.js';

const read = (path: string) => readFileSync(join(DEPLOY, path), 'utf8');

/** Each alert's block of alerts.yml, by name. */
function alertBlocks(): Map<string, string> {
  const blocks = read('prometheus/alerts.yml')
    .split(/^\s*- alert: /m)
    .slice(1);
  return new Map(blocks.map((b) => [b.slice(0, b.indexOf('\n')).trim(), b]));
}

/** Series names a PromQL text mentions: ours by prefix, histogram and counter parts by their family. */
function seriesIn(promql: string): string[] {
  return [...promql.matchAll(/\bflashsale_[a-z0-9_]+/g)].map((m) => m[0]);
}
const exported = () =>
  new Set(
    registry
      .getMetricsAsArray()
      .flatMap((m) =>
        String(m.type) === 'histogram' ? [`${m.name}_bucket`, `${m.name}_count`, `${m.name}_sum`] : [m.name],
      ),
  );

test('promtool: the alerting rules and the scrape config check clean, and the rules pass their unit tests', async () => {
  const rules = await promtool(['check', 'rules', 'prometheus/alerts.yml']);
  assert.equal(rules.code, 0, rules.out);
  const config = await promtool(['check', 'config', 'prometheus/prometheus.yml']);
  assert.equal(config.code, 0, config.out);
  const unit = await promtool(['test', 'rules', 'prometheus/alerts.test.yml']);
  assert.equal(unit.code, 0, unit.out);
  assert.match(unit.out, /SUCCESS/);
});

test('alerts: each has an expression, a for, a severity, a summary and a runbook, and a firing and a quiet unit test', () => {
  const alerts = alertBlocks();
  assert.ok(alerts.size >= 8, [...alerts.keys()].join(', '));
  const tests = read('prometheus/alerts.test.yml');
  for (const [name, block] of alerts) {
    for (const field of [
      /\n\s+expr: \S/,
      /\n\s+for: \d+[smh]\n/,
      /\n\s+severity: (critical|warning)\n/,
      /\n\s+summary: \S/,
      /\n\s+description: \S/,
    ]) {
      assert.match(block, field, `${name} has ${field.source}`);
    }
    const cases = [...tests.matchAll(new RegExp(`alertname: ${name}\\n\\s+exp_alerts:( \\[\\])?\\n`, 'g'))];
    assert.ok(
      cases.some((c) => c[1] === undefined),
      `${name} has a unit test where it fires`,
    );
    assert.ok(
      cases.some((c) => c[1] !== undefined),
      `${name} has a unit test where it does not`,
    );
  }
});

test('alerts and the Grafana board name only series shared/runtime/metrics.ts exports', async () => {
  const known = exported();
  for (const name of new Set(seriesIn(read('prometheus/alerts.yml'))))
    assert.ok(known.has(name), `alerts.yml: ${name} is exported`);

  const board = JSON.parse(read('grafana/flashsale.json')) as {
    schemaVersion: number;
    __inputs: { name: string }[];
    panels: {
      type: string;
      title: string;
      datasource?: { uid: string };
      targets?: { expr: string; datasource: { uid: string } }[];
    }[];
  };
  assert.ok(board.schemaVersion >= 39, 'schemaVersion');
  assert.deepEqual(
    board.__inputs.map((i) => i.name),
    ['DS_PROMETHEUS'],
  );
  const graphs = board.panels.filter((p) => p.type !== 'row');
  for (const want of [
    'Purchases/s by outcome',
    'Where the units are',
    'Writer lag',
    'Expiry lateness',
    'Orders closed/s by daemon',
    'Load shedding',
    'Redis and Postgres unavailable',
    'Payments by outcome',
  ]) {
    assert.ok(
      graphs.some((p) => p.title.startsWith(want)),
      `a panel "${want}"`,
    );
  }
  // Grafana's placeholder for the datasource chosen on import, written as such in the JSON.
  const DS_INPUT = '$' + '{DS_PROMETHEUS}';
  const exprs: string[] = [];
  for (const p of graphs) {
    assert.equal(p.datasource?.uid, DS_INPUT, `${p.title}: datasource from the input`);
    assert.ok(p.targets && p.targets.length > 0, `${p.title} has queries`);
    for (const t of p.targets) {
      assert.equal(t.datasource.uid, DS_INPUT, p.title);
      for (const name of seriesIn(t.expr)) assert.ok(known.has(name), `${p.title}: ${name} is exported`);
      exprs.push(t.expr);
    }
  }
  // Every query is valid PromQL: promtool parses each as a recording rule.
  const asRules = `groups:\n  - name: board\n    rules:\n${exprs
    .map((e, i) => `      - record: board:q${i}\n        expr: ${JSON.stringify(e.replaceAll('$sale', '.*'))}\n`)
    .join('')}`;
  const dir = mkdtempSync(join(tmpdir(), 'flashsale-board-'));
  try {
    writeFileSync(join(dir, 'board.rules.yml'), asRules);
    const r = await promtool(['check', 'rules', join(dir, 'board.rules.yml')]);
    assert.equal(r.code, 0, r.out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
