// Extension entry point: starts `dice-copilot serve` over stdio and hands the client to the controller.
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import { DiceController } from './controller';
import { AcceptArgs, SETTINGS_SECTION, ServerCommand } from './protocol';
import { resolveServerLaunch, ServerNotFoundError } from './serverLaunch';
import { launchSettings, serverSettings } from './settings';
import { StatusView } from './statusView';

let client: LanguageClient | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusItem.command = 'diceCopilot.showStatusAndLog';
  context.subscriptions.push(statusItem);
  const status = new StatusView(statusItem);

  let launch;
  try {
    launch = resolveServerLaunch(launchSettings(vscode.workspace.getConfiguration(SETTINGS_SECTION)));
  } catch (error) {
    if (!(error instanceof ServerNotFoundError)) {
      throw error;
    }
    status.onServerStopped('language server not found');
    const choice = await vscode.window.showErrorMessage(error.message, 'Open Settings');
    if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'diceCopilot.server');
    }
    return;
  }

  const serverOptions: ServerOptions = { command: launch.command, args: launch.args, transport: TransportKind.stdio };
  let controller: DiceController | undefined;
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'cuda-cpp' },
      { scheme: 'file', language: 'python' },
    ],
    initializationOptions: {
      editorInfo: { name: 'vscode', version: vscode.version },
      pluginInfo: { name: 'dice-copilot-vscode', version: String(context.extension.packageJSON.version) },
      // Applied before the server's first configuration pull, so the checkpoint is right from the start.
      settings: serverSettings(vscode.workspace.getConfiguration(SETTINGS_SECTION)),
    },
    middleware: {
      // Accepting an inline item makes VS Code run its `diceCopilot.didAccept` command: note the verdict, then forward it.
      executeCommand: (command, args, next) => {
        if (command === ServerCommand.didAccept) {
          controller?.onAccepted(args[0] as AcceptArgs | undefined);
        }
        return next(command, args);
      },
      workspace: {
        // Answer pulls of our section with only the keys the server knows (no client-only `server.*`).
        configuration: async (params, token, next) => {
          const answers = await next(params, token);
          if (!Array.isArray(answers) || !controller) {
            return answers;
          }
          return params.items.map((item, i) => (item.section === SETTINGS_SECTION ? controller!.currentSettings() : answers[i]));
        },
      },
    },
  };
  client = new LanguageClient('diceCopilot', 'DICE Copilot', serverOptions, clientOptions);
  controller = new DiceController(client, status);
  controller.register();
  context.subscriptions.push(controller);

  try {
    await client.start();
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    status.onServerStopped('language server failed to start');
    void vscode.window.showErrorMessage(
      `DICE Copilot: \`${launch.command} ${launch.args.join(' ')}\` failed to start: ${message}. ` +
        'Check diceCopilot.server.path / diceCopilot.server.pythonPath and the "DICE Copilot" output.',
    );
  }
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
