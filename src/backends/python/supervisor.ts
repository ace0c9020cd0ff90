/**
 * The supervisor of one instance's Python worker process (see
 * backends/supervisor.ts for the restart semantics).
 */
import type { Logger } from 'pino';
import { Supervisor } from '../supervisor.js';
import type { StubProcess } from './stub-process.js';

export class StubSupervisor extends Supervisor<StubProcess> {
  constructor(launch: () => Promise<StubProcess>, logger: Logger, label: string) {
    super(launch, logger, label, 'Python process');
  }
}
