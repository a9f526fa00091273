import { readFileSync } from 'node:fs';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { describe, expect, it } from 'vitest';
import { dcgmExposition } from '../../agent/dcgm-exporter.ts';
import { parseNvidiaSmiXml } from '../../agent/nvidia-smi.ts';

const file = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

/** Every metric name the agent's exposition can write (a GPU with every reading, and the agent's figures). */
async function exportedNames(): Promise<Set<string>> {
  const report = parseNvidiaSmiXml(file('test/fixtures/nvidia-smi/xml/telegraf__a100-sxm4-v12.xml'));
  const text = await dcgmExposition(report, {
    hostname: 'h',
    holders: new Map(),
    agent: { heartbeatAgeSec: 1, lastCheckpointWriteSec: 1, lastCheckpointUploadSec: 1, uploadsInFlight: 0, attemptsRunning: 0 },
  });
  return new Set((parsePrometheusTextFormat(text) as { name: string }[]).map((f) => f.name).concat('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL'));
}

type Target = { datasource: { type: string }; expr?: string; metricName?: string; namespace?: string };
type Panel = { type: string; title: string; targets?: Target[] };

describe('the shipped Prometheus scrape config and Grafana dashboard', () => {
  it('the scrape config finds the machines by the managed tag and scrapes the agents’ port', () => {
    const yml = file('infra/observability/prometheus.yml');
    expect(yml).toMatch(/ec2_sd_configs:/);
    expect(yml).toMatch(/- name: tag:gpu-fleet:managed\n\s+values: \['true'\]/);
    expect(yml).toMatch(/port: 9400/);
    expect(yml).toMatch(/replacement: \$\{1\}:9400/);
    expect(yml).toMatch(/metrics_path: \/metrics/);
  });

  it('every Prometheus panel queries metrics the agent writes, every CloudWatch panel a figure reconcile publishes', async () => {
    const dash = JSON.parse(file('infra/observability/grafana-dashboard.json')) as {
      panels: Panel[];
      templating: { list: { name: string }[] };
    };
    const names = await exportedNames();
    const published = new Set([...file('core/services/metrics.ts').matchAll(/name: '([A-Za-z]+)'/g)].map((m) => m[1]!));
    const targets = dash.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, t })));
    expect(targets.length).toBeGreaterThan(15);
    for (const { panel, t } of targets) {
      if (t.datasource.type === 'prometheus') {
        const used = t.expr!.match(/\b(DCGM_FI_[A-Z0-9_]+|gpu_fleet_agent_[a-z_]+)\b/g) ?? [];
        expect(used.length, panel).toBeGreaterThan(0);
        for (const n of used) expect(names.has(n), `${panel}: ${n}`).toBe(true);
      } else {
        expect(t.datasource.type, panel).toBe('cloudwatch');
        expect(t.namespace).toBe('GpuFleet');
        expect(published.has(t.metricName!), `${panel}: ${t.metricName}`).toBe(true);
      }
    }
    expect(dash.templating.list.map((v) => v.name)).toEqual(['prometheus', 'cloudwatch', 'team']);
  });
});
