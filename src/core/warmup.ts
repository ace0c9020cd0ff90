/**
 * Model warm-up (`model_warmup` in config.pbtxt): synthetic or file-provided
 * requests run on every instance of a version before it becomes READY.
 *
 * As in Triton, each sample of batch_size N is N requests (batch 1 each for a
 * batching model) executed together on the instance, `count` times, and the
 * executions are recorded in the version's statistics like any other. A
 * failing sample fails the version's load with the reason.
 *
 * Warm-up requests go straight to the instance, past the scheduler, so for a
 * model with sequence_batching no sequence batcher fills in the control
 * inputs (START, END, READY, CORRID) or the implicit state: as in Triton, a
 * sample names them among its inputs like any other (Triton adds them as
 * override inputs), with the values it wants the model to see, and they take
 * a batch dim of 1 on a batching model like the model's own inputs.
 */
import { randomFillSync } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { BackendRequest, BackendResponse } from '../backends/backend.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { Errors, type NereidError } from '../errors.js';
import { ScheduledRequest } from '../scheduler/scheduled-request.js';
import { type ModelInstance, executeBatch } from '../scheduler/scheduler.js';
import { SequenceControls } from '../scheduler/sequence-batcher/index.js';
import { type Datatype, datatypeFromConfigEnum, datatypeInfo } from '../tensor/datatype.js';
import type { Tensor } from '../tensor/tensor.js';
import type { ModelVersionStatistics } from '../types/statistics.js';

/** The folder under a model's folder holding warm-up data files (Triton's name). */
export const WARMUP_FOLDER = 'warmup';

export interface WarmupSample {
  readonly name: string;
  readonly count: number;
  /** batch_size requests, run together. */
  readonly requests: readonly BackendRequest[];
}

/**
 * Builds the warm-up samples of a configuration. Throws a clear error naming
 * the sample, input and file for bad settings or data (missing file, too few
 * bytes, variable dims, unknown input).
 */
export async function prepareWarmup(modelName: string, modelDir: string, config: ModelConfig): Promise<WarmupSample[]> {
  const samples: WarmupSample[] = [];
  const batching = config.maxBatchSize > 0;
  const outputs = config.output.map((o) => o.name);
  const expected = warmupInputTypes(config);
  const known = new Set(expected.keys());
  const sequence = config.schedulingChoice.case === 'sequenceBatching';
  for (const setting of config.modelWarmup) {
    if (setting.batchSize === 0) continue; // Triton skips batch 0 samples
    const where = `model '${modelName}' model_warmup '${setting.name}'`;
    const inputs: Tensor[] = [];
    for (const inputName of Object.keys(setting.inputs).sort()) {
      const spec = setting.inputs[inputName]!;
      if (!known.has(inputName)) {
        throw Errors.config(
          `${where}: '${inputName}' is not an input of the model (inputs` +
          `${sequence ? ', sequence control and state inputs' : ''}: ${[...known].join(', ')})`,
        );
      }
      const datatype = datatypeFromConfigEnum(spec.dataType);
      if (!datatype) throw Errors.config(`${where}: input '${inputName}' has no valid data_type`);
      const want = expected.get(inputName);
      if (want !== undefined && datatype !== want) {
        throw Errors.config(
          `${where}: input '${inputName}' has data_type TYPE_${configTypeName(datatype)}, ` +
          `but the model expects TYPE_${configTypeName(want)}`,
        );
      }
      const dims = spec.dims.map(Number);
      if (dims.some((d) => d < 0)) {
        throw Errors.config(
          `${where}: warmup setting expects all variable-size dimensions are specified for input '${inputName}'`,
        );
      }
      const elements = dims.reduce((p, d) => p * d, 1);
      const isBytes = datatype === 'BYTES';
      // BYTES synthetic data: every element an empty string (a zero 4-byte length), as Triton.
      const byteSize = elements * (isBytes ? 4 : datatypeInfo(datatype).byteSize);
      let data: Uint8Array;
      switch (spec.inputDataType.case) {
        case 'zeroData':
          data = new Uint8Array(byteSize);
          break;
        case 'randomData':
          data = new Uint8Array(byteSize);
          if (!isBytes) randomFillSync(data);
          break;
        case 'inputDataFile': {
          const file = spec.inputDataType.value;
          const full = path.join(modelDir, WARMUP_FOLDER, file);
          let bytes: Buffer;
          try {
            bytes = await readFile(full);
          } catch (err) {
            const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
            throw Errors.config(
              `${where}: input '${inputName}': cannot read input_data_file '${file}' (${full}): ${code}`,
            );
          }
          if (isBytes) {
            data = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
          } else {
            if (bytes.byteLength < byteSize) {
              throw Errors.config(
                `${where}: input '${inputName}': warmup setting expects ${byteSize} bytes, ` +
                `but the data provided from ${file} only has ${bytes.byteLength} bytes`,
              );
            }
            data = new Uint8Array(bytes.buffer, bytes.byteOffset, byteSize);
          }
          break;
        }
        default:
          throw Errors.config(`${where}: warmup setting expects input '${inputName}' to have input_data_type set`);
      }
      inputs.push({ name: inputName, datatype, shape: batching ? [1, ...dims] : dims, data });
    }
    const requests: BackendRequest[] = [];
    for (let i = 0; i < setting.batchSize; i++) {
      requests.push({
        id: '',
        inputs,
        requestedOutputs: outputs,
        parameters: {},
        batchSize: 1,
        correlationId: 0n,
        flags: 0,
      });
    }
    samples.push({ name: setting.name, count: Math.max(1, setting.count), requests });
  }
  return samples;
}

/**
 * The inputs a warm-up sample may give, with their datatypes: the model's
 * inputs, and for a sequence model the control inputs and implicit state
 * inputs the sequence batcher would otherwise provide.
 */
function warmupInputTypes(config: ModelConfig): Map<string, Datatype | undefined> {
  const types = new Map<string, Datatype | undefined>();
  for (const i of config.input) types.set(i.name, datatypeFromConfigEnum(i.dataType));
  if (config.schedulingChoice.case !== 'sequenceBatching') return types;
  const seq = config.schedulingChoice.value;
  const controls = new SequenceControls(seq, config.maxBatchSize > 0);
  for (const c of [controls.start, controls.end, controls.ready, controls.corrid]) if (c) types.set(c.name, c.datatype);
  for (const st of seq.state) types.set(st.inputName, datatypeFromConfigEnum(st.dataType));
  return types;
}

/** A datatype as config.pbtxt spells it after TYPE_ (BYTES is STRING there). */
function configTypeName(datatype: Datatype): string {
  return datatype === 'BYTES' ? 'STRING' : datatype;
}

/** Runs one execution of `requests` on `instance`; resolves with the error texts of failed requests. */
async function executeOnce(
  instance: ModelInstance,
  requests: readonly BackendRequest[],
  stats: ModelVersionStatistics,
  modelName: string,
): Promise<string[]> {
  const errors: string[] = [];
  const done: Array<Promise<void>> = [];
  const items = requests.map((r) => {
    let finish!: () => void;
    done.push(new Promise<void>((resolve) => (finish = resolve)));
    return new ScheduledRequest(
      r,
      0,
      0,
      stats,
      (_resp: BackendResponse | undefined, err: NereidError | undefined) => {
        if (err) errors.push(err.message);
        finish();
      },
      undefined,
    );
  });
  await executeBatch(instance, items, items.length, stats, modelName);
  await Promise.all(done);
  return errors;
}

/**
 * Runs every sample `count` times on every instance (instances in parallel,
 * samples in order). Throws "failed to run warmup sample '<name>': ..." at the
 * first failing sample.
 */
export async function runWarmup(
  modelName: string,
  batching: boolean,
  instances: readonly ModelInstance[],
  samples: readonly WarmupSample[],
  stats: ModelVersionStatistics,
  logger: Logger,
): Promise<void> {
  await Promise.all(
    instances.map(async (instance) => {
      for (const sample of samples) {
        for (let iteration = 1; iteration <= sample.count; iteration++) {
          logger.debug({ instance: instance.name, sample: sample.name, iteration }, 'running warmup sample');
          // A model without batching takes one request per execution.
          const groups = batching ? [sample.requests] : sample.requests.map((r) => [r]);
          const errors: string[] = [];
          for (const group of groups) errors.push(...(await executeOnce(instance, group, stats, modelName)));
          if (errors.length > 0) throw Errors.warmupFailed(sample.name, errors.join('; '));
        }
      }
    }),
  );
}
