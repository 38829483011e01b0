// Turns server status, suggestion reasons and verdicts into the status bar text a user reads at a glance.
import { GenerationUpdateParams, ServerState, StatusParams, VerdictLike } from './protocol';

/** The parts of a vscode.StatusBarItem this view writes. */
export interface StatusBarLike {
  text: string;
  tooltip: string | object | undefined;
  show(): void;
}

const STATE_LABEL: Record<ServerState, string> = {
  starting: '$(loading~spin) starting',
  loadingModel: '$(loading~spin) loading model',
  ready: '$(check) ready',
  generating: '$(sync~spin) generating',
  validating: '$(beaker~spin) validating',
  error: '$(error) error',
};

/** Why nothing was suggested, in a few words (reason codes from server/PROTOCOL.md). */
const REASON_LABEL: Record<string, string> = {
  notInKernel: 'not in a kernel',
  modelLoading: 'model loading',
  timeout: 'still validating',
  validationFailed: 'no candidate passed',
  compileError: 'candidates did not compile',
  notChecked: 'cannot check here: see the message',
  superseded: 'superseded',
  noGpu: 'no GPU: compile-only',
  autoTriggerOff: 'auto trigger off',
  generationRunning: 'busy generating',
  checkpointError: 'checkpoint error',
  documentTooLarge: 'document too large',
  promptTooLong: 'prompt too long',
  internalError: 'internal error',
  cancelled: 'cancelled',
};

function firstNumber(value: number | number[] | null | undefined): number | undefined {
  if (Array.isArray(value)) {
    return value.length ? Math.max(...value) : undefined;
  }
  return value ?? undefined;
}

/** "✓ 2.4× vs torch", "✓ compiles (no GPU)", "✓ correct" or "✗ <failure>". */
export function formatVerdict(verdict: VerdictLike): string {
  if (!verdict.passed) {
    return `✗ ${verdict.failure ?? verdict.stage ?? 'failed'}`;
  }
  if (verdict.compileOnly ?? verdict.compile_only) {
    return '✓ compiles (no GPU)';
  }
  if (typeof verdict.speedup === 'number') {
    return `✓ ${verdict.speedup.toFixed(verdict.speedup < 10 ? 1 : 0)}× vs torch`;
  }
  return '✓ correct';
}

/** A longer one-line description of a verdict for tooltips and messages. */
export function describeVerdict(verdict: VerdictLike): string {
  const parts = [formatVerdict(verdict)];
  if (verdict.stage) {
    parts.push(`stage ${verdict.stage}`);
  }
  const maxErr = firstNumber(verdict.maxAbsError ?? verdict.max_abs_error);
  if (maxErr !== undefined) {
    parts.push(`max abs error ${maxErr.toExponential(1)}`);
  }
  return parts.join(', ');
}

export class StatusView {
  private current: ServerState = 'starting';
  private message = 'starting the language server';
  private reason: string | undefined;
  private lastVerdict: string | undefined;
  private lastVerdictDetail: string | undefined;
  private progress: string | undefined;
  private runningJob: string | undefined;
  private untrained = false;

  constructor(private readonly item: StatusBarLike) {
    this.render();
    item.show();
  }

  get state(): ServerState {
    return this.current;
  }

  /** The job the server last reported as running, for "cancel job". */
  get currentJobId(): string | undefined {
    return this.runningJob;
  }

  onStatus(status: StatusParams): void {
    this.current = status.state;
    this.message = status.message;
    this.untrained = status.untrained === true;
    this.reason = status.reason && status.reason !== 'ok' ? status.reason : undefined;
    this.runningJob = status.state === 'generating' || status.state === 'validating' ? status.jobId : undefined;
    if (!this.runningJob) {
      this.progress = undefined;
    }
    this.render();
  }

  onGenerationUpdate(update: GenerationUpdateParams): void {
    this.runningJob = update.jobId;
    const of = update.total ? `/${update.total}` : '';
    const verdict = update.status === 'generated' ? 'generated' : formatVerdict({ ...update, passed: update.status === 'passed' });
    this.progress = `candidate ${update.candidate}${of}: ${verdict}`;
    this.render();
  }

  onVerdict(verdict: VerdictLike): void {
    this.lastVerdict = formatVerdict(verdict);
    this.lastVerdictDetail = describeVerdict(verdict);
    this.render();
  }

  onServerStopped(message: string): void {
    this.current = 'error';
    this.message = message;
    this.untrained = false;
    this.reason = undefined;
    this.runningJob = undefined;
    this.progress = undefined;
    this.render();
  }

  private render(): void {
    const parts = [`DICE ${STATE_LABEL[this.current]}`];
    if (this.untrained) {
      parts.push('$(warning) untrained');
    }
    if (this.progress) {
      parts.push(this.progress);
    } else if (this.reason) {
      parts.push(REASON_LABEL[this.reason] ?? this.reason);
    }
    if (this.lastVerdict) {
      parts.push(this.lastVerdict);
    }
    this.item.text = parts.join(' · ');
    const tooltip = [`DICE Copilot: ${this.message}`];
    if (this.untrained) {
      tooltip.push(
        'The checkpoint is untrained (random weights): its suggestions are noise. ' +
          'Set diceCopilot.checkpoint to a trained DICE checkpoint folder.',
      );
    }
    if (this.lastVerdictDetail) {
      tooltip.push(`Last verdict: ${this.lastVerdictDetail}`);
    }
    tooltip.push('Click for status and log.');
    this.item.tooltip = tooltip.join('\n');
  }
}
