import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local Elastic Load Balancing v2 endpoint for the front door adapter's tests. The SDK speaks
 * the AWS Query protocol to it (form-encoded POST, `Action=…&Version=2015-12-01`, list members as
 * `Targets.member.N.Id`); it answers in the XML shapes of the API reference (API version
 * 2015-12-01: RegisterTargets, DeregisterTargets, DescribeTargetHealth, and the `ErrorResponse`
 * envelope with codes `TargetGroupNotFound` and `InvalidTarget`), assembled from that reference,
 * not recorded. Registered targets are `initial` until `settle()` runs the health checks: a target
 * whose check passes is `healthy`, one whose check fails `unhealthy` (`Target.FailedHealthChecks`),
 * re-checked at each `settle()`; a deregistered one is `draining` until `settle()` removes it, as a
 * target group with a deregistration delay does. The health check is a real HTTP GET of the
 * target's readiness path (`/health`, 2 s, status 200-399) unless the test sets `healthCheck`.
 */
export interface FakeElb {
  readonly endpoint: string;
  /** Target group ARN → "ip:port" → state. */
  readonly groups: Map<string, Map<string, { state: string; reason?: string }>>;
  /** Every call's action and parameters, in order. */
  readonly calls: { action: string; params: Record<string, string> }[];
  /** Runs the health checks of the registered targets; drained targets leave. */
  settle(): Promise<void>;
  /** Whether the target answers its health check (default: an HTTP GET of /health at its address and port). */
  healthCheck: (target: { ip: string; port: number }) => Promise<boolean>;
  /** The next calls of an action fail with this error code and HTTP status. */
  fail(action: string, code: string, status: number, times?: number): void;
  close(): Promise<void>;
}

const NS = 'http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/';

export async function startFakeElb(targetGroupArns: readonly string[]): Promise<FakeElb> {
  const groups = new Map(targetGroupArns.map((a) => [a, new Map<string, { state: string; reason?: string }>()]));
  const calls: { action: string; params: Record<string, string> }[] = [];
  const failures: { action: string; code: string; status: number; times: number }[] = [];
  let requestId = 0;

  const xml = (res: ServerResponse, status: number, body: string) => {
    res.writeHead(status, { 'content-type': 'text/xml' });
    res.end(`<?xml version="1.0" encoding="UTF-8"?>\n${body}`);
  };
  const error = (res: ServerResponse, status: number, code: string, message: string) =>
    xml(
      res,
      status,
      `<ErrorResponse xmlns="${NS}"><Error><Type>Sender</Type><Code>${code}</Code><Message>${message}</Message></Error><RequestId>req-${++requestId}</RequestId></ErrorResponse>`,
    );
  const targetsOf = (params: Record<string, string>) => {
    const out: { id: string; port: string }[] = [];
    for (let n = 1; params[`Targets.member.${n}.Id`] !== undefined; n++)
      out.push({ id: params[`Targets.member.${n}.Id`]!, port: params[`Targets.member.${n}.Port`] ?? '' });
    return out;
  };

  const handle = (req: IncomingMessage, res: ServerResponse, body: string) => {
    const params = Object.fromEntries(new URLSearchParams(body));
    const action = params.Action ?? '';
    calls.push({ action, params });
    const failure = failures.find((f) => f.action === action && f.times > 0);
    if (failure) {
      failure.times--;
      return error(res, failure.status, failure.code, `injected ${failure.code}`);
    }
    const arn = params.TargetGroupArn ?? '';
    const group = groups.get(arn);
    if (!group) return error(res, 400, 'TargetGroupNotFound', `One or more target groups not found`);
    const meta = `<ResponseMetadata><RequestId>req-${++requestId}</RequestId></ResponseMetadata>`;
    switch (action) {
      case 'RegisterTargets': {
        for (const t of targetsOf(params)) {
          if (!t.port) return error(res, 400, 'ValidationError', 'A port must be given for each IP target');
          const key = `${t.id}:${t.port}`;
          const now = group.get(key);
          if (!now || now.state === 'draining') group.set(key, { state: 'initial', reason: 'Elb.RegistrationInProgress' });
        }
        return xml(res, 200, `<RegisterTargetsResponse xmlns="${NS}"><RegisterTargetsResult/>${meta}</RegisterTargetsResponse>`);
      }
      case 'DeregisterTargets': {
        const targets = targetsOf(params);
        const missing = targets.find((t) => !group.has(`${t.id}:${t.port}`));
        if (missing) return error(res, 400, 'InvalidTarget', `The following targets are not registered: '${missing.id}'`);
        for (const t of targets) group.set(`${t.id}:${t.port}`, { state: 'draining', reason: 'Target.DeregistrationInProgress' });
        return xml(res, 200, `<DeregisterTargetsResponse xmlns="${NS}"><DeregisterTargetsResult/>${meta}</DeregisterTargetsResponse>`);
      }
      case 'DescribeTargetHealth': {
        const members = [...group.entries()]
          .map(([key, h]) => {
            const [id, port] = key.split(':');
            return `<member><HealthCheckPort>${port}</HealthCheckPort><TargetHealth><State>${h.state}</State>${h.reason ? `<Reason>${h.reason}</Reason>` : ''}</TargetHealth><Target><Port>${port}</Port><Id>${id}</Id></Target></member>`;
          })
          .join('');
        return xml(
          res,
          200,
          `<DescribeTargetHealthResponse xmlns="${NS}"><DescribeTargetHealthResult><TargetHealthDescriptions>${members}</TargetHealthDescriptions></DescribeTargetHealthResult>${meta}</DescribeTargetHealthResponse>`,
        );
      }
      default:
        return error(res, 400, 'InvalidAction', `The action ${action} is not valid for this web service.`);
    }
  };

  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => handle(req, res, body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  const elb: FakeElb = {
    endpoint: `http://127.0.0.1:${port}`,
    groups,
    calls,
    healthCheck: httpHealthCheck,
    async settle() {
      for (const g of groups.values())
        for (const [key, h] of [...g.entries()]) {
          if (h.state === 'draining') {
            g.delete(key);
            continue;
          }
          const [ip, p] = key.split(':');
          const ok = await elb.healthCheck({ ip: ip!, port: Number(p) });
          g.set(key, ok ? { state: 'healthy' } : { state: 'unhealthy', reason: 'Target.FailedHealthChecks' });
        }
    },
    fail(action, code, status, times = 1) {
      failures.push({ action, code, status, times });
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  return elb;
}

/** An Application Load Balancer's HTTP health check: GET /health at the target, answered 200-399 within 2 s. */
async function httpHealthCheck(target: { ip: string; port: number }): Promise<boolean> {
  try {
    const res = await fetch(`http://${target.ip}:${target.port}/health`, { signal: AbortSignal.timeout(2000), redirect: 'manual' });
    await res.body?.cancel();
    return res.status >= 200 && res.status < 400;
  } catch {
    return false;
  }
}
