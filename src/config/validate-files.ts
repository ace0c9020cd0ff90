/**
 * File names a config refers to (labels, warmup data, initial state, the
 * model file) must stay inside the model's folder: a config must not be able
 * to make the server read arbitrary files.
 */
import { posix, win32 } from 'node:path';
import type { ConfigChecker } from './validate-context.js';

/** True when `name`, taken relative to a folder, leads out of it. */
export function escapesFolder(name: string): boolean {
  if (name === '') return false;
  if (posix.isAbsolute(name) || win32.isAbsolute(name)) return true;
  const normal = posix.normalize(name.replaceAll('\\', '/'));
  return normal === '..' || normal.startsWith('../');
}

export function validateFileReferences(c: ConfigChecker): void {
  const { config } = c;
  const check = (path: string, what: string, name: string, folder: string) => {
    if (escapesFolder(name)) c.fail(path, `${what} "${name}" must be a path inside the model's ${folder}`);
  };
  check('default_model_filename', 'default_model_filename', config.defaultModelFilename, 'version folder');
  for (const [cc, name] of Object.entries(config.ccModelFilenames)) {
    check(`cc_model_filenames[${cc}]`, 'cc_model_filenames entry', name, 'version folder');
  }
  config.output.forEach((io, i) => {
    check(`output[${i}].label_filename`, `output "${io.name}": label_filename`, io.labelFilename, 'folder');
  });
  config.modelWarmup.forEach((warmup, i) => {
    for (const [input, spec] of Object.entries(warmup.inputs)) {
      if (spec.inputDataType.case === 'inputDataFile') {
        check(
          `model_warmup[${i}].inputs[${input}].input_data_file`,
          `model_warmup "${warmup.name}": input_data_file`,
          spec.inputDataType.value,
          'warmup folder',
        );
      }
    }
  });
  if (config.schedulingChoice.case === 'sequenceBatching') {
    config.schedulingChoice.value.state.forEach((state, i) => {
      state.initialState.forEach((init, j) => {
        if (init.stateData.case === 'dataFile') {
          check(
            `sequence_batching.state[${i}].initial_state[${j}].data_file`,
            `sequence_batching state "${state.inputName}": data_file`,
            init.stateData.value,
            'initial_state folder',
          );
        }
      });
    });
  }
}
