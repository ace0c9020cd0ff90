/** JavaScript models for the backend's tests, written into throwaway repositories. */
import { DATATYPES } from '../../../src/tensor/datatype.js';
import type { TempRepository } from '../../helpers/repository.js';

export function jsModel(repo: TempRepository, name: string, config: string, source: string, file = 'model.mjs'): void {
  repo.config(name, config);
  repo.file(name, `1/${file}`, source);
}

/** Every datatype, with its config enum name. */
export const ALL_TYPES = DATATYPES.map((d) => ({ datatype: d.name, configName: d.configName }));

/**
 * One input and one output per datatype, returned as they came (or, with
 * parameter COPY, as copies the model made), plus KINDS: what the model saw
 * as each input's data.
 */
export function allTypesConfig(name: string, copy: boolean): string {
  const io = (prefix: string) =>
    ALL_TYPES.map((t) => `{ name: "${prefix}_${t.datatype}" data_type: ${t.configName} dims: [ -1 ] }`).join(',\n  ');
  return `name: "${name}"
backend: "javascript"
max_batch_size: 0
input [
  ${io('IN')}
]
output [
  ${io('OUT')},
  { name: "KINDS" data_type: TYPE_STRING dims: [ ${ALL_TYPES.length} ] }
]
${copy ? 'parameters: { key: "COPY" value: { string_value: "1" } }' : ''}
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

export const ALL_TYPES_MODEL = `
export default class {
  async initialize(args) {
    this.copy = args.modelConfig.parameters.COPY?.string_value === '1';
    this.name = args.modelName;
  }
  async execute(requests) {
    return requests.map((r) => {
      const outputs = r.inputs.map((t) => {
        let data = t.data;
        if (this.copy) {
          if (t.datatype === 'BYTES') data = t.data.map((e) => new TextDecoder().decode(e));
          else if (t.datatype === 'INT32') data = Array.from(t.data);
          else data = t.data.slice();
        }
        return { name: t.name.replace('IN_', 'OUT_'), datatype: t.datatype, shape: t.shape, data };
      });
      const kinds = r.inputs.map((t) =>
        t.name + ':' +
        (Array.isArray(t.data) ? 'Array of ' + (t.data[0]?.constructor.name ?? 'nothing') : t.data.constructor.name));
      outputs.push({ name: 'KINDS', datatype: 'BYTES', shape: [kinds.length], data: kinds });
      return { outputs };
    });
  }
}
`;

/** Dynamic batching: each response says how many requests its execute() got. */
export const BATCHER_CONFIG = `name: "batcher"
backend: "javascript"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "REQUESTS" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

export const BATCHER_MODEL = `
export default class {
  async execute(requests) {
    return requests.map((r) => {
      const x = r.inputs[0];
      return {
        outputs: [
          { name: 'OUT', datatype: 'INT32', shape: x.shape, data: x.data.map((v) => v * 10) },
          {
            name: 'REQUESTS',
            datatype: 'INT32',
            shape: [r.batchSize, 1],
            data: new Int32Array(r.batchSize).fill(requests.length),
          },
        ],
      };
    });
  }
}
`;

/** BLS into the ONNX "simple" add/sub model; TARGET names the model to call. */
export function blsConfig(name: string, target: string): string {
  return `name: "${name}"
backend: "javascript"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] } ]
parameters: { key: "TARGET" value: { string_value: "${target}" } }
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

export const BLS_MODEL = `
export default class {
  async initialize(args) {
    this.infer = args.infer;
    this.target = args.modelConfig.parameters.TARGET.string_value;
  }
  async execute(requests) {
    return Promise.all(requests.map(async (r) => {
      const [a, b] = r.inputs;
      try {
        const res = await this.infer({
          model: this.target,
          inputs: [{ ...a, name: 'INPUT0' }, { ...b, name: 'INPUT1' }],
          outputs: ['OUTPUT0', 'OUTPUT1'],
        });
        const [sum, diff] = res.outputs;
        return { outputs: [{ ...sum, name: 'SUM' }, { ...diff, name: 'DIFF' }] };
      } catch (err) {
        return { error: 'BLS failed: ' + err.message + ' [' + err.code + ']' };
      }
    }));
  }
}
`;

/** MODE picks a way to misbehave; 0 answers [42]. */
export const FAULTY_CONFIG = `name: "faulty"
backend: "javascript"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters: { key: "execute_timeout_ms" value: { string_value: "300" } }
parameters: { key: "max_heap_mb" value: { string_value: "48" } }
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

export const Mode = {
  ok: 0,
  throws: 1,
  wrongCount: 2,
  wrongDatatype: 3,
  wrongShape: 4,
  neverResolves: 5,
  errorResponse: 6,
  unknownOutput: 7,
  missingOutput: 8,
  wrongSize: 9,
  blocks: 10,
  exits: 11,
  throwsInTimer: 12,
  notAnArray: 13,
  slowOk: 14,
  outOfMemory: 15,
} as const;

// Line numbers matter: the tests look for "1/model.mjs:<line>" of the throws.
export const FAULTY_MODEL = `export default class {
  async execute(requests) {
    const mode = requests[0].inputs[0].data[0];
    const ok = [{ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data: new Int32Array([42]) }] }];
    switch (mode) {
      case 0: return ok;
      case 1: throw new TypeError('the model tripped');
      case 2: return [];
      case 3: return [{ outputs: [{ name: 'OUT', datatype: 'FP32', shape: [1], data: new Float32Array([1]) }] }];
      case 4: return [{ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [2], data: new Int32Array([1, 2]) }] }];
      case 5: return new Promise(() => {});
      case 6: return [{ error: 'custom failure' }];
      case 7: return [{ outputs: [{ name: 'NOPE', datatype: 'INT32', shape: [1], data: new Int32Array([1]) }] }];
      case 8: return [{ outputs: [] }];
      case 9: return [{ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data: new Int32Array(3) }] }];
      case 10: for (;;) {}
      case 11: setTimeout(() => process.exit(3), 20); return new Promise(() => {});
      case 12: setTimeout(() => { throw new RangeError('timer went off'); }, 20); return new Promise(() => {});
      case 13: return { outputs: [] };
      case 14: await new Promise((r) => setTimeout(r, 50)); return ok;
      case 15: { const hoard = []; for (;;) hoard.push(new Array(1 << 16).fill(mode)); }
    }
  }
}
`;
