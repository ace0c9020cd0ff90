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
  db.preferredBatchSize.forEach((size, i) => {
    const path = `dynamic_batching.preferred_batch_size[${i}]`;
    if (size <= 0) c.fail(path, `dynamic_batching: preferred_batch_size must be positive, got ${size}`);
    if (size > mbs) c.fail(path, `dynamic_batching: preferred_batch_size ${size} is larger than max_batch_size ${mbs}`);
  });

  const levels = db.priorityLevels;
  if (levels !== 0n) {
    if (db.defaultPriorityLevel === 0n || db.defaultPriorityLevel > levels) {
      c.fail(
        'dynamic_batching.default_priority_level',
        `dynamic_batching: default_priority_level must be between 1 and ${levels} (priority_levels), got ${db.defaultPriorityLevel}`,
      );
    }
    for (const key of Object.keys(db.priorityQueuePolicy)) {
      const level = BigInt(key);
      if (level === 0n || level > levels) {
        c.fail(
          `dynamic_batching.priority_queue_policy[${key}]`,
          `dynamic_batching: priority_queue_policy for level ${key} is outside the priority levels 1..${levels}`,
        );
      }
    }
  }

  if (db.preserveOrdering) {
    if (levels > 1n) {
      c.fail(
        'dynamic_batching.priority_levels',
        `dynamic_batching: preserve_ordering allows only one priority level, but priority_levels is ${levels}`,
      );
    }
    const delays = (policy: ModelQueuePolicy | undefined) =>
      policy !== undefined &&
      policy.defaultTimeoutMicroseconds !== 0n &&
      policy.timeoutAction === ModelQueuePolicy_TimeoutAction.DELAY;
    const why = 'dynamic_batching: with preserve_ordering, a queue policy cannot use timeout_action DELAY with a timeout';
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
  if (c.config.responseCache?.enable) {
    c.fail('response_cache.enable', 'response_cache cannot be enabled for a model that uses sequence_batching');
  }

  // Each control tensor is named once, and each kind of control appears once.
  const tensors = new Map<string, number>();
  const kinds = new Map<number, string>();
  seq.controlInput.forEach((ci, i) => {
    const path = `sequence_batching.control_input[${i}]`;
    if (ci.name === '') c.fail(path, `sequence_batching: control_input ${i} must have a "name"`);
    if (tensors.has(ci.name)) {
      c.fail(`${path}.name`, `sequence_batching: control tensor "${ci.name}" is listed more than once`);
    }
    tensors.set(ci.name, i);
    ci.control.forEach((ctl, j) => {
      const ctlPath = `${path}.control[${j}]`;
      const kind = enumName(ModelSequenceBatching_Control_KindSchema, ctl.kind);
      const other = kinds.get(ctl.kind);
      if (other !== undefined) {
        c.fail(`${ctlPath}.kind`, `sequence_batching: ${kind} is given by two tensors, "${other}" and "${ci.name}"`);
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
          c.fail(`${ctlPath}.${set[0]![0]}`, `sequence_batching: ${kind} control "${ci.name}" takes a data_type, not ${set[0]![0]}`);
        }
        if (!CORRID_TYPES.has(ctl.dataType)) {
          c.fail(
            `${ctlPath}.data_type`,
            `sequence_batching: ${kind} control "${ci.name}" must have data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING`,
          );
        }
      } else if (
        ctl.kind === ControlKind.CONTROL_SEQUENCE_START ||
        ctl.kind === ControlKind.CONTROL_SEQUENCE_END ||
        ctl.kind === ControlKind.CONTROL_SEQUENCE_READY
      ) {
        if (set.length === 0) {
          c.fail(ctlPath, `sequence_batching: ${kind} control "${ci.name}" must give one of int32_false_true, fp32_false_true or bool_false_true`);
        }
        if (set.length > 1) {
          c.fail(ctlPath, `sequence_batching: ${kind} control "${ci.name}" gives both ${set[0]![0]} and ${set[1]![0]}; give only one`);
        }
        const [name, count] = set[0]!;
        if (count !== 2) {
          c.fail(`${ctlPath}.${name}`, `sequence_batching: ${name} of ${kind} control "${ci.name}" needs exactly 2 values [false, true], got ${count}`);
        }
      }
    });
  });

  const strategy = seq.strategyChoice;
  if (strategy.case === 'oldest') {
    const mbs = c.config.maxBatchSize;
    strategy.value.preferredBatchSize.forEach((size, i) => {
      const path = `sequence_batching.oldest.preferred_batch_size[${i}]`;
      if (size <= 0) c.fail(path, `sequence_batching: preferred_batch_size must be positive, got ${size}`);
      if (size > mbs) c.fail(path, `sequence_batching: preferred_batch_size ${size} is larger than max_batch_size ${mbs}`);
    });
  } else if (strategy.case === 'direct') {
    const u = strategy.value.minimumSlotUtilization;
    if (!(u >= 0 && u <= 1)) {
      c.fail(
        'sequence_batching.direct.minimum_slot_utilization',
        `sequence_batching: minimum_slot_utilization must be between 0 and 1, got ${u}`,
      );
    }
  }
}
