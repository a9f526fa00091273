import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local EC2 endpoint answering GetSpotPlacementScores and DescribeAvailabilityZones, for the
 * placement-score adapter's tests. The SDK speaks EC2's query protocol to it (form-encoded POST,
 * `Action=…&Version=2016-11-15`, lists as `InstanceType.1`); it answers in the XML of the API
 * reference (`GetSpotPlacementScoresResponse` with `spotPlacementScoreSet` items of `region`,
 * `availabilityZoneId`, `score`, and `nextToken`; `DescribeAvailabilityZonesResponse` with
 * `availabilityZoneInfo` items of `zoneName`, `zoneId`, `regionName`; errors as
 * `<Response><Errors><Error>`), assembled from the reference, not recorded. What it checks, as
 * the reference says: TargetCapacity is required (1 to 2,000,000,000); MaxResults is 10 to 1,000;
 * at most 1,000 instance types; types and instance requirements are not both given. With fewer
 * than three types every score is 1 ("always low"). Zones are paged by MaxResults.
 */
export interface FakeEc2Scores {
  readonly endpoint: string;
  readonly calls: { action: string; params: Record<string, string> }[];
  /** Zone id → score, for requests of three types or more. */
  scores: Map<string, number>;
  /** Every call from now on answers this error code (with HTTP 403 for UnauthorizedOperation, else 400). */
  refuse: string | undefined;
  close(): Promise<void>;
}

const NS = 'http://ec2.amazonaws.com/doc/2016-11-15/';

export async function startFakeEc2Scores(region: string, zones: Record<string, string>): Promise<FakeEc2Scores> {
  const calls: FakeEc2Scores['calls'] = [];
  let requestId = 0;
  const state = { scores: new Map<string, number>(), refuse: undefined as string | undefined };
  const xml = (res: ServerResponse, status: number, body: string) => {
    res.writeHead(status, { 'content-type': 'text/xml' });
    res.end(`<?xml version="1.0" encoding="UTF-8"?>\n${body}`);
  };
  const error = (res: ServerResponse, status: number, code: string, message: string) =>
    xml(
      res,
      status,
      `<Response><Errors><Error><Code>${code}</Code><Message>${message}</Message></Error></Errors><RequestID>req-${++requestId}</RequestID></Response>`,
    );
  const list = (params: Record<string, string>, name: string) => {
    const out: string[] = [];
    for (let n = 1; params[`${name}.${n}`] !== undefined; n++) out.push(params[`${name}.${n}`]!);
    return out;
  };
  const handle = (res: ServerResponse, params: Record<string, string>) => {
    const action = params.Action ?? '';
    calls.push({ action, params });
    if (state.refuse)
      return error(
        res,
        state.refuse === 'UnauthorizedOperation' ? 403 : 400,
        state.refuse,
        'You are not authorized to perform this operation.',
      );
    if (action === 'DescribeAvailabilityZones') {
      const items = Object.entries(zones)
        .map(
          ([id, name]) =>
            `<item><zoneState>available</zoneState><regionName>${region}</regionName><zoneName>${name}</zoneName><zoneId>${id}</zoneId><zoneType>availability-zone</zoneType></item>`,
        )
        .join('');
      return xml(
        res,
        200,
        `<DescribeAvailabilityZonesResponse xmlns="${NS}"><requestId>req-${++requestId}</requestId><availabilityZoneInfo>${items}</availabilityZoneInfo></DescribeAvailabilityZonesResponse>`,
      );
    }
    if (action !== 'GetSpotPlacementScores')
      return error(res, 400, 'InvalidAction', `The action ${action} is not valid for this web service.`);
    const capacity = Number(params.TargetCapacity);
    if (params.TargetCapacity === undefined)
      return error(res, 400, 'MissingParameter', 'The request must contain the parameter TargetCapacity');
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > 2_000_000_000)
      return error(res, 400, 'InvalidParameterValue', `Value (${params.TargetCapacity}) for parameter TargetCapacity is invalid.`);
    const max = params.MaxResults !== undefined ? Number(params.MaxResults) : 1000;
    if (!Number.isInteger(max) || max < 10 || max > 1000)
      return error(
        res,
        400,
        'InvalidParameterValue',
        `Value (${params.MaxResults}) for parameter MaxResults is invalid. Expecting a value between 10 and 1000.`,
      );
    const types = list(params, 'InstanceType');
    if (types.length > 1000) return error(res, 400, 'InvalidParameterValue', 'At most 1000 instance types may be given.');
    if (types.length > 0 && Object.keys(params).some((k) => k.startsWith('InstanceRequirementsWithMetadata')))
      return error(res, 400, 'InvalidParameterCombination', "You can't specify both InstanceTypes and InstanceRequirementsWithMetadata.");
    const regions = list(params, 'RegionName');
    const single = params.SingleAvailabilityZone === 'true';
    const rows = single
      ? Object.keys(zones)
          .filter(() => regions.length === 0 || regions.includes(region))
          .map((id) => ({ region, zoneId: id, score: types.length < 3 ? 1 : (state.scores.get(id) ?? 5) }))
      : [{ region, zoneId: undefined, score: types.length < 3 ? 1 : 5 }];
    const from = params.NextToken !== undefined ? Number(params.NextToken) : 0;
    const page = rows.slice(from, from + max);
    const next = from + max < rows.length ? `<nextToken>${from + max}</nextToken>` : '';
    const items = page
      .map(
        (r) =>
          `<item><region>${r.region}</region>${r.zoneId ? `<availabilityZoneId>${r.zoneId}</availabilityZoneId>` : ''}<score>${r.score}</score></item>`,
      )
      .join('');
    return xml(
      res,
      200,
      `<GetSpotPlacementScoresResponse xmlns="${NS}"><requestId>req-${++requestId}</requestId><spotPlacementScoreSet>${items}</spotPlacementScoreSet>${next}</GetSpotPlacementScoresResponse>`,
    );
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => handle(res, Object.fromEntries(new URLSearchParams(body))));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    get scores() {
      return state.scores;
    },
    set scores(v) {
      state.scores = v;
    },
    get refuse() {
      return state.refuse;
    },
    set refuse(v) {
      state.refuse = v;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
