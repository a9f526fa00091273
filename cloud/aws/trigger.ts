import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { translateAwsError } from './errors.ts';

/** Asks for a reconcile now (an asynchronous invocation of the reconcile function); without one configured, does nothing. */
export function reconcileTrigger(lambda: LambdaClient, functionName: string | undefined): { reconcileSoon(reason: string): Promise<void> } {
  return {
    async reconcileSoon(reason: string) {
      if (!functionName) return;
      try {
        await lambda.send(
          new InvokeCommand({
            FunctionName: functionName,
            InvocationType: 'Event',
            Payload: new TextEncoder().encode(JSON.stringify({ reason })),
          }),
        );
      } catch (error) {
        throw translateAwsError(error, { operation: 'trigger reconcile', resource: functionName });
      }
    },
  };
}
