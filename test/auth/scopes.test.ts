import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API_GROUPS, Grants, MODEL_GROUPS, ScopeError, parseScope } from '../../src/auth/index.js';

test('every API group is a scope, and only the model groups take a pattern', () => {
  for (const group of API_GROUPS) {
    assert.ok(new Grants([group]).allows(group, MODEL_GROUPS.has(group) ? 'any_model' : undefined));
    if (MODEL_GROUPS.has(group)) assert.deepEqual(parseScope(`${group}:a*`), { group, models: 'a*' });
    else assert.throws(() => parseScope(`${group}:a`), ScopeError);
  }
  assert.throws(() => parseScope('admin'), /unknown scope 'admin'/);
});

test('model globs: * any run, ? one character, everything else literal', () => {
  const g = new Grants(['inference:fraud_*', 'inference:v?.onnx', 'metadata:exact']);
  assert.ok(g.allows('inference', 'fraud_'));
  assert.ok(g.allows('inference', 'fraud_eu_2'));
  assert.ok(!g.allows('inference', 'xfraud_a'));
  assert.ok(g.allows('inference', 'v1.onnx'));
  assert.ok(!g.allows('inference', 'v1xonnx'), "'.' is literal");
  assert.ok(!g.allows('inference', 'v12.onnx'));
  assert.ok(g.allows('metadata', 'exact'));
  assert.ok(!g.allows('metadata', 'exact2'));
  assert.ok(!g.allows('model-config', 'exact'));
  // A server-wide endpoint of a group is open to any grant in it; a full list needs every model.
  assert.ok(g.allows('metadata'));
  assert.ok(!g.allowsEveryModel('metadata'));
  assert.ok(new Grants(['metadata']).allowsEveryModel('metadata'));
  assert.ok(new Grants(['metadata:*']).allowsEveryModel('metadata'));
  // The same model asked again, in the same group and in another one (the last answer is remembered per glob).
  for (let i = 0; i < 3; i++) {
    assert.ok(g.allows('inference', 'fraud_a'));
    assert.ok(!g.allows('metadata', 'fraud_a'));
    assert.ok(g.allows('metadata', 'exact'));
    assert.ok(!g.allows('inference', 'exact'));
  }
});

test('* opens every group and model, the metrics port and the OpenAI routes', () => {
  const g = new Grants(['*']);
  for (const group of API_GROUPS) assert.ok(g.allows(group, 'm'));
  assert.ok(g.allowsEveryModel('statistics'));
});

test('no scopes open nothing', () => {
  const g = new Grants([]);
  for (const group of API_GROUPS) assert.ok(!g.allows(group, 'm'));
});
