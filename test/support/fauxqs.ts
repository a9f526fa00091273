import { SQSClient } from '@aws-sdk/client-sqs';
import { startFauxqs } from 'fauxqs';

/** A real SQS-compatible server (fauxqs, in process) on a free local port, for the tests. */
export async function startSqs() {
  const server = await startFauxqs({ port: 0, logger: false });
  // fauxqs hands out queue URLs on sqs.<region>.localhost: send every call to its address instead.
  const sqs = new SQSClient({
    endpoint: server.address,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    useQueueUrlAsEndpoint: false,
    maxAttempts: 2,
  });
  return {
    server,
    sqs,
    async close() {
      sqs.destroy();
      await server.stop();
    },
  };
}
