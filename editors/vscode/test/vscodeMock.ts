// A small stand-in for the `vscode` module: importing this file makes `require('vscode')` return it.
import Module = require('module');

type Listener<T> = (event: T) => void;

export class FakeEventEmitter<T> {
  private listeners: Listener<T>[] = [];
  readonly event = (listener: Listener<T>) => {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  };
  fire(value: T): void {
    this.listeners.forEach((l) => l(value));
  }
}

export interface FakeDocument {
  uri: { toString(): string };
  version: number;
  languageId: string;
  getText(): string;
}

export interface ShownMessage {
  level: 'info' | 'warning' | 'error';
  text: string;
}

/** Everything tests inspect or steer; reset() between tests. */
export const mockState = {
  settings: {} as Record<string, unknown>,
  commands: new Map<string, (...args: unknown[]) => unknown>(),
  executed: [] as Array<{ command: string; args: unknown[] }>,
  messages: [] as ShownMessage[],
  messageAnswer: undefined as string | undefined,
  activeTextEditor: undefined as
    | { document: FakeDocument; selection: { active: { line: number; character: number } } }
    | undefined,
  configurationChanged: new FakeEventEmitter<{ affectsConfiguration(section: string): boolean }>(),
  reset(): void {
    this.settings = {};
    this.commands.clear();
    this.executed = [];
    this.messages = [];
    this.messageAnswer = undefined;
    this.activeTextEditor = undefined;
    this.configurationChanged = new FakeEventEmitter();
  },
};

/** An editor on `text` with the cursor at (line, character). */
export function openEditor(uri: string, languageId: string, text: string, line: number, character = 0, version = 1): void {
  mockState.activeTextEditor = {
    document: { uri: { toString: () => uri }, version, languageId, getText: () => text },
    selection: { active: { line, character } },
  };
}

function showMessage(level: ShownMessage['level']) {
  return async (text: string) => {
    mockState.messages.push({ level, text });
    return mockState.messageAnswer;
  };
}

const vscodeMock = {
  version: '1.91.0-mock',
  StatusBarAlignment: { Left: 1, Right: 2 },
  window: {
    get activeTextEditor() {
      return mockState.activeTextEditor;
    },
    showInformationMessage: showMessage('info'),
    showWarningMessage: showMessage('warning'),
    showErrorMessage: showMessage('error'),
  },
  commands: {
    registerCommand(command: string, handler: (...args: unknown[]) => unknown) {
      mockState.commands.set(command, handler);
      return { dispose: () => mockState.commands.delete(command) };
    },
    async executeCommand(command: string, ...args: unknown[]) {
      mockState.executed.push({ command, args });
      return mockState.commands.get(command)?.(...args);
    },
  },
  workspace: {
    getConfiguration(section: string) {
      return {
        get<T>(key: string): T | undefined {
          return mockState.settings[`${section}.${key}`] as T | undefined;
        },
      };
    },
    onDidChangeConfiguration(listener: Listener<{ affectsConfiguration(section: string): boolean }>) {
      return mockState.configurationChanged.event(listener);
    },
  },
};

const moduleWithLoad = Module as unknown as { _load(request: string, ...rest: unknown[]): unknown };
const originalLoad = moduleWithLoad._load;
moduleWithLoad._load = function (request: string, ...rest: unknown[]) {
  return request === 'vscode' ? vscodeMock : originalLoad.call(this, request, ...rest);
};
