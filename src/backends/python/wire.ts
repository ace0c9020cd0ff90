/** Tensors <-> frame descriptions; data is never copied, only referenced. */
import type { Datatype } from '../../tensor/datatype.js';
import type { Tensor } from '../../tensor/tensor.js';
import type { WireTensor } from './frame.js';

export function encodeWireTensors(
  tensors: readonly Tensor[],
  buffers: Uint8Array[] = [],
): { metas: WireTensor[]; buffers: Uint8Array[] } {
  const metas = new Array<WireTensor>(tensors.length);
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!;
    metas[i] = { n: t.name, d: t.datatype, s: t.shape as number[], b: buffers.length };
    buffers.push(t.data);
  }
  return { metas, buffers };
}

/** Tensors whose data are views into the received frame's buffers. */
export function decodeWireTensors(metas: readonly WireTensor[], buffers: readonly Uint8Array[]): Tensor[] {
  const out = new Array<Tensor>(metas.length);
  for (let i = 0; i < metas.length; i++) out[i] = decodeWireTensor(metas[i]!, buffers);
  return out;
}

export function decodeWireTensor(m: WireTensor, buffers: readonly Uint8Array[]): Tensor {
  const data = buffers[m.b];
  if (!data) throw new Error(`tensor '${m.n}' refers to missing buffer ${m.b}`);
  return { name: m.n, datatype: m.d as Datatype, shape: m.s, data };
}
