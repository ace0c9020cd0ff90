/**
 * Writes the .onnx files of examples/model_repository (the configurations
 * and label files are committed; the models are generated, so the
 * repository holds no binaries). Run by `npm run build`:
 *
 *   node dist/scripts/build-examples.js [repository-dir]
 *
 * Idempotent: a file whose bytes are already what would be written is left
 * alone, so repeated builds do not touch modification times (which a
 * polling server would take for an update).
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { OnnxModelBuilder, buildAddSubModel, buildMlp, seededRandom } from '../test/helpers/onnx-builder.js';
import { TINY_LLM_MARKERS, textEmbedderModel, wordLevelTokenizerJson, wordPieceTokenizerJson } from './example-text.js';

export interface ExampleModel {
  /** Path of the file inside the repository, e.g. "simple/1/model.onnx". */
  readonly file: string;
  readonly build: () => OnnxModelBuilder;
}

/** Version 2 of simple_versioned: a product instead of a sum, so the versions answer differently. */
function mulSubModel(): OnnxModelBuilder {
  const b = new OnnxModelBuilder({ name: 'mul_sub' });
  b.input('INPUT0', 'FP32', ['batch', 4]).input('INPUT1', 'FP32', ['batch', 4]);
  b.output('OUTPUT0', 'FP32', ['batch', 4]).output('OUTPUT1', 'FP32', ['batch', 4]);
  b.node('Mul', ['INPUT0', 'INPUT1'], ['OUTPUT0']);
  b.node('Sub', ['INPUT0', 'INPUT1'], ['OUTPUT1']);
  return b;
}

/** image [batch, 3, 8, 8] -> Flatten -> linear -> Softmax -> probabilities [batch, 10]. */
function imageClassifier(): OnnxModelBuilder {
  const features = 3 * 8 * 8;
  const classes = 10;
  const rand = seededRandom(2024);
  const w = Float32Array.from({ length: features * classes }, () => (rand() * 2 - 1) * 0.2);
  const bias = Float32Array.from({ length: classes }, () => (rand() * 2 - 1) * 0.1);
  const b = new OnnxModelBuilder({ name: 'image_classifier' });
  b.input('image', 'FP32', ['batch', 3, 8, 8]).output('probabilities', 'FP32', ['batch', classes]);
  b.initializer('w', 'FP32', [features, classes], w).initializer('b', 'FP32', [classes], bias);
  b.node('Flatten', ['image'], ['flat'], { axis: { i: 1 } });
  b.node('MatMul', ['flat', 'w'], ['logits_mm']);
  b.node('Add', ['logits_mm', 'b'], ['logits']);
  b.node('Softmax', ['logits'], ['probabilities'], { axis: { i: -1 } });
  return b;
}

/** Raw transaction features [batch, 10] -> (x - mean) / scale -> the standardized features fraud_detector takes. */
function fraudPreprocess(): OnnxModelBuilder {
  const mean = Float32Array.from([120, 14, 3, 0.5, 1, 40, 0.2, 5, 0.1, 2]);
  const inverseScale = Float32Array.from([1 / 250, 1 / 10, 1 / 4, 1, 1, 1 / 30, 1, 1 / 8, 1, 1 / 3]);
  const b = new OnnxModelBuilder({ name: 'fraud_preprocess' });
  b.input('raw_features', 'FP32', ['batch', 10]).output('input_features', 'FP32', ['batch', 10]);
  b.initializer('mean', 'FP32', [10], mean).initializer('inverse_scale', 'FP32', [10], inverseScale);
  b.node('Sub', ['raw_features', 'mean'], ['centered']);
  b.node('Mul', ['centered', 'inverse_scale'], ['input_features']);
  return b;
}

/**
 * Ensembles: a folder with a committed config.pbtxt and an empty version folder, made here (git keeps no empty
 * folders).
 */
export const EXAMPLE_ENSEMBLE_VERSION_DIRS: readonly string[] = ['fraud_pipeline/1'];

export const EXAMPLE_MODELS: readonly ExampleModel[] = [
  { file: 'fraud_preprocess/1/model.onnx', build: fraudPreprocess },
  {
    file: 'fraud_detector/1/model.onnx',
    build: () =>
      buildMlp([10, 32, 16, 1], 42, {
        inputName: 'input_features',
        outputName: 'fraud_probability',
        outputActivation: 'sigmoid',
      }).builder,
  },
  {
    file: 'fraud_detector_large/1/model.onnx',
    build: () =>
      buildMlp([10, 64, 64, 1], 43, {
        inputName: 'input_features',
        outputName: 'fraud_probability',
        outputActivation: 'sigmoid',
      }).builder,
  },
  { file: 'simple/1/model.onnx', build: () => buildAddSubModel('INT32', 16) },
  { file: 'simple_versioned/1/model.onnx', build: () => buildAddSubModel('FP32', 4) },
  { file: 'simple_versioned/2/model.onnx', build: mulSubModel },
  {
    file: 'autocomplete_mlp/1/model.onnx',
    build: () => buildMlp([4, 8, 2], 7, { inputName: 'x', outputName: 'scores' }).builder,
  },
  { file: 'image_classifier/1/model.onnx', build: imageClassifier },
  { file: 'text_embedder/1/model.onnx', build: textEmbedderModel },
];

/** Generated text files (the tokenizers of the OpenAI examples: their vocabulary is made in example-text.ts). */
export const EXAMPLE_TEXT_FILES: ReadonlyArray<{ readonly file: string; readonly text: () => string }> = [
  { file: 'text_embedder/tokenizer.json', text: () => wordPieceTokenizerJson() },
  { file: 'tiny_llm/tokenizer.json', text: () => wordLevelTokenizerJson(TINY_LLM_MARKERS) },
];

export interface BuildResult {
  readonly written: string[];
  readonly unchanged: string[];
}

/** Writes every example model under `repositoryDir` that is missing or different. */
export async function buildExampleModels(repositoryDir: string): Promise<BuildResult> {
  const result: BuildResult = { written: [], unchanged: [] };
  for (const dir of EXAMPLE_ENSEMBLE_VERSION_DIRS) await mkdir(join(repositoryDir, dir), { recursive: true });
  for (const m of EXAMPLE_MODELS) {
    const path = join(repositoryDir, m.file);
    const builder = m.build();
    const bytes = builder.toBytes();
    const current = await readFile(path).catch(() => undefined);
    if (current && Buffer.compare(current, bytes) === 0) {
      result.unchanged.push(m.file);
      continue;
    }
    await builder.save(path);
    result.written.push(m.file);
  }
  for (const f of EXAMPLE_TEXT_FILES) {
    const path = join(repositoryDir, f.file);
    const text = f.text();
    const current = await readFile(path, 'utf8').catch(() => undefined);
    if (current === text) {
      result.unchanged.push(f.file);
      continue;
    }
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, text);
    result.written.push(f.file);
  }
  return result;
}

/** The package root: the nearest folder above this file holding package.json. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('package.json not found above build-examples');
    dir = parent;
  }
  return dir;
}

export function defaultExamplesDir(): string {
  return join(packageRoot(), 'examples', 'model_repository');
}

const invokedDirectly = process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  const target = process.argv[2] ? resolve(process.argv[2]) : defaultExamplesDir();
  buildExampleModels(target).then(
    (r) => {
      process.stdout.write(
        `example models in ${target}: ${r.written.length} written, ${r.unchanged.length} up to date\n`,
      );
    },
    (err: unknown) => {
      process.stderr.write(`build-examples failed: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}
