import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseModelConfig } from '../../src/config/index.js';
import { missingVersionMessage, selectVersions, selectVersionsDetailed } from '../../src/repository/index.js';

const policyOf = (text: string) => parseModelConfig(text, 'm/config.pbtxt').versionPolicy;

describe('selectVersions', () => {
  const available = [3, 1, 10, 2];

  it('no policy serves the highest version', () => {
    assert.deepEqual(selectVersions(undefined, available), [10]);
  });

  it('latest { n } serves the n highest, numerically', () => {
    assert.deepEqual(selectVersions(policyOf('version_policy { latest { num_versions: 2 } }'), available), [3, 10]);
    assert.deepEqual(
      selectVersions(policyOf('version_policy { latest { num_versions: 9 } }'), available),
      [1, 2, 3, 10],
    );
    assert.deepEqual(selectVersions(policyOf('version_policy { latest { num_versions: 0 } }'), available), []);
  });

  it('all serves every version; so does an empty policy', () => {
    assert.deepEqual(selectVersions(policyOf('version_policy { all { } }'), available), [1, 2, 3, 10]);
    assert.deepEqual(selectVersions(policyOf('version_policy { }'), available), [1, 2, 3, 10]);
  });

  it('specific serves the listed versions that exist and reports the missing ones', () => {
    const policy = policyOf('version_policy { specific { versions: [ 3, 7, 1, 3 ] } }');
    assert.deepEqual(selectVersions(policy, available), [1, 3]);
    assert.deepEqual(selectVersionsDetailed(policy, available), { versions: [1, 3], missing: [7] });
    assert.equal(
      missingVersionMessage('m', 7),
      "version 7 is specified for model 'm', but the version directory is not present",
    );
  });

  it('version 0 is a real version', () => {
    assert.deepEqual(selectVersions(undefined, [0]), [0]);
  });

  it('no folders, no versions', () => {
    assert.deepEqual(selectVersions(undefined, []), []);
  });
});
