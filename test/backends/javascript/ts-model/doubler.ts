/**
 * A JavaScript model written in TypeScript against Nereid's model types and
 * compiled with the project; the backend's tests serve the compiled file.
 */
import type {
  JavaScriptModel,
  JavaScriptModelArgs,
  JavaScriptRequest,
  JavaScriptResponse,
} from '../../../../src/index.js';

export default class Doubler implements JavaScriptModel {
  private name = '';

  initialize(args: JavaScriptModelArgs): void {
    this.name = args.modelName;
  }

  async execute(requests: JavaScriptRequest[]): Promise<JavaScriptResponse[]> {
    return requests.map((r) => {
      const x = r.inputs[0]!;
      if (!(x.data instanceof Int32Array)) return { error: `${this.name} takes INT32` };
      return { outputs: [{ name: 'Y', datatype: 'INT32', shape: x.shape, data: x.data.map((v) => v * 2) }] };
    });
  }
}
