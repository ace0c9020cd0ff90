/** A FIFO queue with O(1) push/shift (a ring buffer that grows). */
export class Fifo<T> {
  private items: (T | undefined)[];
  private head = 0;
  private count = 0;

  constructor(capacity = 64) {
    this.items = new Array(capacity);
  }

  get length(): number {
    return this.count;
  }

  push(item: T): void {
    if (this.count === this.items.length) this.grow();
    this.items[(this.head + this.count) % this.items.length] = item;
    this.count += 1;
  }

  peek(): T | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  /** The i-th element from the front (0 = front). */
  at(i: number): T | undefined {
    return i < this.count ? this.items[(this.head + i) % this.items.length] : undefined;
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count -= 1;
    return item;
  }

  /** Removes and returns every element for which `pred` holds, keeping the order of the rest. */
  removeWhere(pred: (item: T) => boolean): T[] {
    const removed: T[] = [];
    const kept: T[] = [];
    while (this.count > 0) {
      const item = this.shift()!;
      (pred(item) ? removed : kept).push(item);
    }
    for (const item of kept) this.push(item);
    return removed;
  }

  private grow(): void {
    const next = new Array<T | undefined>(this.items.length * 2);
    for (let i = 0; i < this.count; i++) next[i] = this.items[(this.head + i) % this.items.length];
    this.items = next;
    this.head = 0;
  }
}
