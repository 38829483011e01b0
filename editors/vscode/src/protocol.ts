// The DICE Copilot wire names and payload shapes the extension relies on (see server/PROTOCOL.md).

export const SETTINGS_SECTION = 'diceCopilot';

export const ServerCommand = {
  didAccept: 'diceCopilot.didAccept',
  generateKernel: 'diceCopilot.generateKernel',
  validateKernel: 'diceCopilot.validateKernel',
  cancelJob: 'diceCopilot.cancelJob',
  showStatus: 'diceCopilot.showStatus',
} as const;

export const ServerNotification = {
  status: 'diceCopilot/status',
  suggestionReady: 'diceCopilot/suggestionReady',
  generationUpdate: 'diceCopilot/generationUpdate',
} as const;

export type ServerState = 'starting' | 'loadingModel' | 'ready' | 'generating' | 'validating' | 'error';

export interface StatusParams {
  state: ServerState;
  message: string;
  reason?: string;
  jobId?: string;
  uri?: string;
  gpu?: boolean;
  compileOnly?: boolean;
  /** The checkpoint serving is marked untrained (config.json or its model card): its suggestions are noise. */
  untrained?: boolean;
  lastLatencyMs?: number;
}

export interface LspPosition {
  line: number;
  character: number;
}

export interface SuggestionReadyParams {
  uri: string;
  version: number;
  position: LspPosition;
  count?: number;
}

/**
 * A validation result as the server reports it. Accept arguments and generation results use camelCase;
 * `validateKernel` returns the validator's own Verdict JSON, which is snake_case.
 */
export interface VerdictLike {
  passed?: boolean;
  stage?: string | null;
  compileOnly?: boolean;
  compile_only?: boolean;
  speedup?: number | null;
  maxAbsError?: number | number[] | null;
  max_abs_error?: number | number[] | null;
  failure?: string | null;
}

export interface GenerationUpdateParams {
  jobId: string;
  /** 1-based index of the candidate among `total`. */
  candidate: number;
  total?: number;
  status: 'generated' | 'passed' | 'failed';
  stage?: string | null;
  speedup?: number | null;
  maxAbsError?: number | null;
  failure?: string | null;
  log?: string;
}

export interface GenerateResult {
  jobId: string;
  status: 'ok' | 'noValidCandidate' | 'cancelled' | 'error';
  message: string;
  best?: { uri: string; speedup?: number | null; maxAbsError?: number | null; compileOnly?: boolean };
  candidates: Array<{ index: number; passed: boolean; stage?: string | null; failure?: string | null; speedup?: number | null }>;
}

export interface AcceptArgs {
  id: string;
  uri: string;
  verdict: VerdictLike;
}
