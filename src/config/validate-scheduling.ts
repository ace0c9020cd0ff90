/** Rules for dynamic_batching and sequence_batching (Triton ValidateModelConfig). */
import {
  DataType,
  ModelQueuePolicy_TimeoutAction,
  ModelSequenceBatching_Control_Kind as ControlKind,
  ModelSequenceBatching_Control_KindSchema,
  type ModelDynamicBatching,
  type ModelQueuePolicy,
  type ModelSequenceBatching,
} from '../gen/model_config_pb.js';
import { ConfigChecker, enumName } from './validate-context.js';

export function validateDynamicBatching(c: ConfigChecker, db: ModelDynamicBatching): void {
  const mbs = c.config.maxBatchSize;
  const model = c.config.name;
  db.preferredBatchSize.forEach((size, i) => {
    const path = `dynamic_batching.preferred_batch_size[${i}]`;
    if (size <= 0) c.fail(path, `dynamic batching preferred size must be positive for ${model} (got ${size})`);
    if (size > mbs) {
      c.fail(
        path,
        `dynamic batching preferred size must be <= max batch size for ` +
        `${model} (preferred_batch_size ${size}, max_batch_size ${mbs})`,
      );
    }
  });

  const levels = db.priorityLevels;
  if (levels !== 0n) {
    if (db.defaultPriorityLevel === 0n || db.defaultPriorityLevel > levels) {
      c.fail(
        'dynamic_batching.default_priority_level',
        `default priority level must be in range [1, ${levels}] for ${model} ` +
        `(dynamic_batching.default_priority_level is ${db.defaultPriorityLevel})`,
      );
    }
    for (const key of Object.keys(db.priorityQueuePolicy)) {
      const level = BigInt(key);
      if (level === 0n || level > levels) {
        c.fail(
          `dynamic_batching.priority_queue_policy[${key}]`,
          `priority queue policy must have priority level in range [1, ${levels}] ` +
          `for ${model} (dynamic_batching.priority_queue_policy has level ${key})`,
        );
      }
    }
  }

  if (db.preserveOrdering) {
    if (levels > 1n) {
      c.fail(
        'dynamic_batching.priority_levels',
        `Only one priority level is allowed when 'preserve_ordering' is ` +
        `true for ${model} (dynamic_batching.priority_levels is ${levels})`,
      );
    }
    const delays = (policy: ModelQueuePolicy | undefined) =>
      policy !== undefined &&
      policy.defaultTimeoutMicroseconds !== 0n &&
      policy.timeoutAction === ModelQueuePolicy_TimeoutAction.DELAY;
    const why = `Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true ` +
      `for ${model} (dynamic_batching: a queue policy with a timeout uses timeout_action DELAY)`;
    if (delays(db.defaultQueuePolicy)) c.fail('dynamic_batching.default_queue_policy.timeout_action', why);
    for (const [key, policy] of Object.entries(db.priorityQueuePolicy)) {
      if (delays(policy)) c.fail(`dynamic_batching.priority_queue_policy[${key}].timeout_action`, why);
    }
  }
}

const CORRID_TYPES: ReadonlySet<DataType> = new Set([
  DataType.TYPE_UINT64,
  DataType.TYPE_INT64,
  DataType.TYPE_UINT32,
  DataType.TYPE_INT32,
  DataType.TYPE_STRING,
]);

export function validateSequenceBatching(c: ConfigChecker, seq: ModelSequenceBatching): void {
  const model = c.config.name;
  if (c.config.responseCache?.enable) {
    c.fail(
      'response_cache.enable',
      `Response Cache does not currently support model ${model} with ` +
      `sequence batching scheduler. Please disable the response cache.`,
    );
  }

  // Each control tensor is named once, and each kind of control appears once.
  const tensors = new Map<string, number>();
  const kinds = new Map<number, string>();
  seq.controlInput.forEach((ci, i) => {
    const path = `sequence_batching.control_input[${i}]`;
    if (ci.name === '')
      c.fail(path, `sequence batching control tensor must have a name for ${model} (control_input ${i})`);
    if (tensors.has(ci.name)) {
      c.fail(
        `${path}.name`,
        `sequence batching control tensor '${ci.name}' is specified for multiple control kinds for ${model}`,
      );
    }
    tensors.set(ci.name, i);
    ci.control.forEach((ctl, j) => {
      const ctlPath = `${path}.control[${j}]`;
      const kind = enumName(ModelSequenceBatching_Control_KindSchema, ctl.kind);
      const other = kinds.get(ctl.kind);
      if (other !== undefined) {
        c.fail(
          `${ctlPath}.kind`,
          `sequence batching specifies multiple ${kind} tensors for ${model} ("${other}" and "${ci.name}")`,
        );
      }
      kinds.set(ctl.kind, ci.name);
      const given = [
        ['int32_false_true', ctl.int32FalseTrue.length],
        ['fp32_false_true', ctl.fp32FalseTrue.length],
        ['bool_false_true', ctl.boolFalseTrue.length],
      ] as const;
      const set = given.filter(([, n]) => n > 0);
      if (ctl.kind === ControlKind.CONTROL_SEQUENCE_CORRID) {
        if (set.length > 0) {
          c.fail(
            `${ctlPath}.${set[0]![0]}`,
            `sequence_batching: ${kind} control "${ci.name}" takes a data_type, not ${set[0]![0]}`,
          );
        }
        if (!CORRID_TYPES.has(ctl.dataType)) {
          c.fail(
            `${ctlPath}.data_type`,
            `unexpected data type for control ${kind} for ${model}. Allowed data types are ` +
            `TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING (control "${ci.name}")`,
          );
        }
      } else if (
        ctl.kind === ControlKind.CONTROL_SEQUENCE_START ||
        ctl.kind === ControlKind.CONTROL_SEQUENCE_END ||
        ctl.kind === ControlKind.CONTROL_SEQUENCE_READY
      ) {
        if (set.length === 0) {
          c.fail(
            ctlPath,
            `sequence batching must specify either 'int32_false_true', 'fp32_false_true' ` +
            `or 'bool_false_true' for ${kind} for ${model} (control "${ci.name}")`,
          );
        }
        if (set.length > 1) {
          c.fail(
            ctlPath,
            `sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and ` +
            `'bool_false_true' for ${kind} for ${model} (control "${ci.name}" gives ${set[0]![0]} and ${set[1]![0]})`,
          );
        }
        const [name, count] = set[0]!;
        if (count !== 2) {
          c.fail(
            `${ctlPath}.${name}`,
            `sequence batching control '${name}' must have exactly 2 entries for ${kind} ` +
            `for ${model} (control "${ci.name}" has ${count}: give [false, true])`,
          );
        }
      }
    });
  });

  const strategy = seq.strategyChoice;
  if (strategy.case === 'oldest') {
    const mbs = c.config.maxBatchSize;
    strategy.value.preferredBatchSize.forEach((size, i) => {
      const path = `sequence_batching.oldest.preferred_batch_size[${i}]`;
      if (size <= 0) c.fail(path, `sequence batching preferred batch size must be positive for ${model} (got ${size})`);
      if (size > mbs) {
        c.fail(
          path,
          `sequence batching preferred batch size must be <= max batch size ` +
          `for ${model} (preferred_batch_size ${size}, max_batch_size ${mbs})`,
        );
      }
    });
  } else if (strategy.case === 'direct') {
    const u = strategy.value.minimumSlotUtilization;
    if (!(u >= 0 && u <= 1)) {
      c.fail(
        'sequence_batching.direct.minimum_slot_utilization',
        `sequence batching minimum slot utilization must be in range (0.0, 1.0] for ${model} (got ${u})`,
      );
    }
  }
}
