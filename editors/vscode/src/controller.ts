// Binds the language client to VS Code: commands, status bar, settings forwarding and suggestionReady re-triggers.
import * as vscode from 'vscode';
import {
  AcceptArgs,
  GenerateResult,
  GenerationUpdateParams,
  SETTINGS_SECTION,
  ServerCommand,
  ServerNotification,
  StatusParams,
  SuggestionReadyParams,
  VerdictLike,
} from './protocol';
import { findModuleClassAt } from './moduleLocator';
import { serverSettings } from './settings';
import { describeVerdict, formatVerdict, StatusView } from './statusView';

/** The slice of vscode-languageclient's LanguageClient the controller talks through (a fake in unit tests). */
export interface ClientLike {
  onNotification(method: string, handler: (params: any) => void): vscode.Disposable;
  sendRequest<R>(method: string, params: unknown): Promise<R>;
  sendNotification(method: string, params: unknown): Promise<void>;
  restart(): Promise<void>;
  readonly outputChannel: vscode.OutputChannel;
}

/** VS Code commands contributed by package.json (the server's own commands are registered by the client). */
export const ClientCommand = {
  generateKernelAtCursor: 'diceCopilot.generateKernelAtCursor',
  validateKernelAtCursor: 'diceCopilot.validateKernelAtCursor',
  cancelJobs: 'diceCopilot.cancelJobs',
  showStatusAndLog: 'diceCopilot.showStatusAndLog',
  restartServer: 'diceCopilot.restartServer',
} as const;

const CUDA_LANGUAGES = new Set(['cuda-cpp', 'cuda', 'python']);

export class DiceController implements vscode.Disposable {
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly client: ClientLike,
    readonly status: StatusView,
  ) {}

  /** Registers commands and notification handlers; call once the client exists (before or after start). */
  register(): void {
    this.disposables.push(
      this.client.onNotification(ServerNotification.status, (p: StatusParams) => this.onStatus(p)),
      this.client.onNotification(ServerNotification.suggestionReady, (p: SuggestionReadyParams) =>
        this.onSuggestionReady(p),
      ),
      this.client.onNotification(ServerNotification.generationUpdate, (p: GenerationUpdateParams) =>
        this.onGenerationUpdate(p),
      ),
      vscode.commands.registerCommand(ClientCommand.generateKernelAtCursor, () => this.generateKernelAtCursor()),
      vscode.commands.registerCommand(ClientCommand.validateKernelAtCursor, () => this.validateKernelAtCursor()),
      vscode.commands.registerCommand(ClientCommand.cancelJobs, () => this.cancelJobs()),
      vscode.commands.registerCommand(ClientCommand.showStatusAndLog, () => this.showStatusAndLog()),
      vscode.commands.registerCommand(ClientCommand.restartServer, () => this.client.restart()),
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (event.affectsConfiguration(SETTINGS_SECTION)) {
          void this.pushSettings();
        }
      }),
    );
  }

  dispose(): void {
    this.disposables.forEach((d) => d.dispose());
    this.disposables.length = 0;
  }

  /** The server-facing settings object, also the answer to `workspace/configuration` for our section. */
  currentSettings(): Record<string, unknown> {
    return serverSettings(vscode.workspace.getConfiguration(SETTINGS_SECTION));
  }

  /** Pushes the settings; the server also pulls them, but a push makes a change take effect at once. */
  async pushSettings(): Promise<void> {
    await this.client.sendNotification('workspace/didChangeConfiguration', {
      settings: { [SETTINGS_SECTION]: this.currentSettings() },
    });
  }

  /** Updates the status bar; when the model has just become ready, asks again where the user is typing, since
   * requests made while it loaded were answered empty. */
  async onStatus(status: StatusParams): Promise<void> {
    const wasLoading = this.status.state === 'starting' || this.status.state === 'loadingModel';
    this.status.onStatus(status);
    const editor = vscode.window.activeTextEditor;
    if (wasLoading && status.state === 'ready' && editor && CUDA_LANGUAGES.has(editor.document.languageId)) {
      await vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
    }
  }

  /** The server finished a suggestion that an earlier request timed out on: ask VS Code to request again. */
  async onSuggestionReady(params: SuggestionReadyParams): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.uri.toString() !== params.uri || editor.document.version !== params.version) {
      return;
    }
    await vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
  }

  /** Called by the executeCommand middleware when VS Code runs an accepted item's `diceCopilot.didAccept`. */
  onAccepted(args: AcceptArgs | undefined): void {
    if (args?.verdict) {
      this.status.onVerdict(args.verdict);
    }
  }

  onGenerationUpdate(update: GenerationUpdateParams): void {
    this.status.onGenerationUpdate(update);
    const verdict = update.status === 'generated' ? 'generated' : formatVerdict({ ...update, passed: update.status === 'passed' });
    this.client.outputChannel.appendLine(`[job ${update.jobId}] candidate ${update.candidate}: ${verdict}`);
    if (update.log) {
      this.client.outputChannel.appendLine(update.log);
    }
  }

  async generateKernelAtCursor(): Promise<GenerateResult | undefined> {
    const editor = vscode.window.activeTextEditor;
    const found = editor?.document.languageId === 'python'
      ? findModuleClassAt(editor.document.getText(), editor.selection.active.line)
      : undefined;
    if (!editor || !found) {
      void vscode.window.showWarningMessage(
        'DICE Copilot: put the cursor inside a `class X(nn.Module)` in a Python file to generate its CUDA kernel.',
      );
      return undefined;
    }
    const argument = {
      uri: editor.document.uri.toString(),
      className: found.className,
      position: { line: editor.selection.active.line, character: editor.selection.active.character },
    };
    const result = await this.executeServerCommand<GenerateResult>(ServerCommand.generateKernel, argument);
    if (!result) {
      return undefined;
    }
    if (result.status === 'ok' && result.best) {
      const verdict = { passed: true, ...result.best };
      this.status.onVerdict(verdict);
      void vscode.window.showInformationMessage(
        `DICE Copilot: kernel for ${found.className}: ${describeVerdict(verdict)} (${result.best.uri.split('/').pop()})`,
      );
    } else if (result.status === 'cancelled') {
      void vscode.window.showInformationMessage(`DICE Copilot: generation for ${found.className} cancelled.`);
    } else {
      void this.showProblem(`DICE Copilot: no kernel for ${found.className}: ${result.message}`);
    }
    return result;
  }

  async validateKernelAtCursor(): Promise<VerdictLike | undefined> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || !CUDA_LANGUAGES.has(editor.document.languageId)) {
      void vscode.window.showWarningMessage('DICE Copilot: open a .cu file or a Python file with CUDA sources to validate a kernel.');
      return undefined;
    }
    const argument = {
      uri: editor.document.uri.toString(),
      position: { line: editor.selection.active.line, character: editor.selection.active.character },
    };
    const result = await this.executeServerCommand<{ uri: string; verdict: VerdictLike }>(
      ServerCommand.validateKernel,
      argument,
    );
    if (!result) {
      return undefined;
    }
    this.status.onVerdict(result.verdict);
    const text = `DICE Copilot: ${describeVerdict(result.verdict)}`;
    if (result.verdict.passed) {
      void vscode.window.showInformationMessage(text);
    } else {
      void this.showProblem(text);
    }
    return result.verdict;
  }

  async cancelJobs(): Promise<string[]> {
    const jobId = this.status.currentJobId;
    const result = await this.executeServerCommand<{ cancelled: string[] }>(ServerCommand.cancelJob, jobId ? { jobId } : {});
    const cancelled = result?.cancelled ?? [];
    void vscode.window.showInformationMessage(
      cancelled.length ? `DICE Copilot: cancelled ${cancelled.join(', ')}.` : 'DICE Copilot: no job was running.',
    );
    return cancelled;
  }

  async showStatusAndLog(): Promise<void> {
    const status = await this.executeServerCommand<StatusParams & Record<string, unknown>>(ServerCommand.showStatus, {});
    const channel = this.client.outputChannel;
    if (status) {
      channel.appendLine(`[status] ${JSON.stringify(status, null, 2)}`);
      this.status.onStatus(status);
    }
    channel.show(true);
  }

  private async executeServerCommand<R>(command: string, argument: unknown): Promise<R | undefined> {
    try {
      return await this.client.sendRequest<R>('workspace/executeCommand', { command, arguments: [argument] });
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      void this.showProblem(`DICE Copilot: ${command} failed: ${message}`);
      return undefined;
    }
  }

  private async showProblem(message: string): Promise<void> {
    const choice = await vscode.window.showWarningMessage(message, 'Show Log');
    if (choice === 'Show Log') {
      this.client.outputChannel.show(true);
    }
  }
}
