// The controller against a mocked `vscode` module and a fake language client: commands, notifications, settings.
import { mockState, openEditor } from './vscodeMock';
import { beforeEach, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { ClientCommand, ClientLike, DiceController } from '../src/controller';
import { StatusView } from '../src/statusView';

class FakeClient implements ClientLike {
  handlers = new Map<string, (params: any) => void>();
  requests: Array<{ method: string; params: any }> = [];
  notifications: Array<{ method: string; params: any }> = [];
  replies = new Map<string, unknown>();
  log: string[] = [];
  logShown = false;
  readonly outputChannel = {
    appendLine: (line: string) => this.log.push(line),
    show: () => (this.logShown = true),
  } as any;
  onNotification(method: string, handler: (params: any) => void) {
    this.handlers.set(method, handler);
    return { dispose: () => this.handlers.delete(method) };
  }
  async sendRequest<R>(method: string, params: any): Promise<R> {
    this.requests.push({ method, params });
    const reply = this.replies.get(params.command);
    if (reply instanceof Error) {
      throw reply;
    }
    return reply as R;
  }
  async sendNotification(method: string, params: unknown) {
    this.notifications.push({ method, params });
  }
  async restart() {}
  notify(method: string, params: unknown) {
    this.handlers.get(method)!(params);
  }
}

let client: FakeClient;
let statusItem: { text: string; tooltip: string | object | undefined; show(): void };
let controller: DiceController;

beforeEach(() => {
  mockState.reset();
  client = new FakeClient();
  statusItem = { text: '', tooltip: undefined, show() {} };
  controller = new DiceController(client, new StatusView(statusItem));
  controller.register();
});

const MODULE_FILE = 'import torch\nfrom torch import nn\n\nclass Softplus(nn.Module):\n    def forward(self, x):\n        return torch.log1p(torch.exp(x))\n';

test('all contributed commands are registered', () => {
  for (const command of Object.values(ClientCommand)) {
    assert.ok(mockState.commands.has(command), command);
  }
});

test('suggestionReady re-triggers inline suggestions only for the active document at that version', async () => {
  openEditor('file:///k.cu', 'cuda-cpp', '', 3, 4, 7);
  client.notify('diceCopilot/suggestionReady', { uri: 'file:///other.cu', version: 7, position: { line: 3, character: 4 } });
  client.notify('diceCopilot/suggestionReady', { uri: 'file:///k.cu', version: 6, position: { line: 3, character: 4 } });
  await controller.onSuggestionReady({ uri: 'file:///k.cu', version: 7, position: { line: 3, character: 4 } });
  assert.deepEqual(mockState.executed.map((e) => e.command), ['editor.action.inlineSuggest.trigger']);
});

test('when the model becomes ready, inline suggestions are requested again in a CUDA editor', async () => {
  openEditor('file:///k.cu', 'cuda-cpp', '', 3, 4);
  await controller.onStatus({ state: 'loadingModel', message: 'Loading checkpoint' });
  assert.equal(mockState.executed.length, 0);
  await controller.onStatus({ state: 'ready', message: 'loaded' });
  await controller.onStatus({ state: 'ready', message: 'still ready' });
  assert.deepEqual(mockState.executed.map((e) => e.command), ['editor.action.inlineSuggest.trigger']);
});

test('status notifications update the status bar', () => {
  client.notify('diceCopilot/status', { state: 'loadingModel', message: 'Loading checkpoint' });
  assert.match(statusItem.text, /loading model/);
  client.notify('diceCopilot/status', { state: 'ready', message: 'ready', reason: 'timeout' });
  assert.equal(statusItem.text, 'DICE $(check) ready · still validating');
});

test('generate sends the class under the cursor and reports the verdict of the best kernel', async () => {
  openEditor('file:///w/softplus.py', 'python', MODULE_FILE, 5, 8);
  client.replies.set('diceCopilot.generateKernel', {
    jobId: 'job-1', status: 'ok', message: 'ok', candidates: [],
    best: { uri: 'file:///w/softplus_kernel.py', speedup: 2.4, maxAbsError: 3e-6, compileOnly: false },
  });
  await mockState.commands.get(ClientCommand.generateKernelAtCursor)!();
  assert.deepEqual(client.requests[0], {
    method: 'workspace/executeCommand',
    params: {
      command: 'diceCopilot.generateKernel',
      arguments: [{ uri: 'file:///w/softplus.py', className: 'Softplus', position: { line: 5, character: 8 } }],
    },
  });
  assert.match(statusItem.text, /✓ 2\.4× vs torch$/);
  assert.match(mockState.messages[0].text, /Softplus.*2\.4× vs torch.*softplus_kernel\.py/);
});

test('generate outside a module explains where to put the cursor and sends nothing', async () => {
  openEditor('file:///w/softplus.py', 'python', MODULE_FILE, 0);
  await controller.generateKernelAtCursor();
  assert.equal(client.requests.length, 0);
  assert.equal(mockState.messages[0].level, 'warning');
  assert.match(mockState.messages[0].text, /class X\(nn\.Module\)/);
});

test('a server error on generate is shown with the server message, and Show Log opens the log', async () => {
  openEditor('file:///w/softplus.py', 'python', MODULE_FILE, 4);
  client.replies.set('diceCopilot.generateKernel', new Error('define `get_inputs()` returning example inputs'));
  mockState.messageAnswer = 'Show Log';
  await controller.generateKernelAtCursor();
  assert.match(mockState.messages[0].text, /get_inputs\(\)/);
  await new Promise((resolve) => setImmediate(resolve));
  assert.ok(client.logShown);
});

test('validate sends uri and cursor and shows the verdict', async () => {
  openEditor('file:///w/k.cu', 'cuda-cpp', '__global__ void k() {}', 0, 20);
  client.replies.set('diceCopilot.validateKernel', {
    uri: 'file:///w/k.cu',
    verdict: { passed: false, stage: 'static', failure: 'compile error at line 1', compile_only: true },
  });
  const verdict = await controller.validateKernelAtCursor();
  assert.equal(verdict?.passed, false);
  assert.deepEqual(client.requests[0].params.arguments, [{ uri: 'file:///w/k.cu', position: { line: 0, character: 20 } }]);
  assert.match(statusItem.text, /✗ compile error at line 1/);
});

test('cancel names the running job when one is known, else cancels all', async () => {
  client.replies.set('diceCopilot.cancelJob', { cancelled: ['job-9'] });
  client.notify('diceCopilot/generationUpdate', { jobId: 'job-9', candidate: 0, total: 2, status: 'generated' });
  assert.deepEqual(await controller.cancelJobs(), ['job-9']);
  assert.deepEqual(client.requests[0].params.arguments, [{ jobId: 'job-9' }]);
  client.notify('diceCopilot/status', { state: 'ready', message: 'idle' });
  client.replies.set('diceCopilot.cancelJob', { cancelled: [] });
  await controller.cancelJobs();
  assert.deepEqual(client.requests[1].params.arguments, [{}]);
  assert.match(mockState.messages[1].text, /no job was running/);
});

test('accepting an item records its verdict', () => {
  controller.onAccepted({ id: 'a1', uri: 'file:///k.cu', verdict: { passed: true, stage: 'timed', speedup: 1.7 } });
  assert.match(statusItem.text, /✓ 1\.7× vs torch/);
});

test('changing a diceCopilot setting pushes the server settings', async () => {
  mockState.settings = { 'diceCopilot.checkpoint': '/ckpt', 'diceCopilot.validation.timing': false, 'diceCopilot.server.path': 'x' };
  mockState.configurationChanged.fire({ affectsConfiguration: (s: string) => s === 'other' });
  assert.equal(client.notifications.length, 0);
  mockState.configurationChanged.fire({ affectsConfiguration: (s: string) => s === 'diceCopilot' });
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(client.notifications, [
    { method: 'workspace/didChangeConfiguration', params: { settings: { diceCopilot: { checkpoint: '/ckpt', validation: { timing: false } } } } },
  ]);
});

test('show status writes the server status to the log and opens it', async () => {
  client.replies.set('diceCopilot.showStatus', { state: 'ready', message: 'ready', checkpoint: 'default', device: 'cpu', gpu: false });
  await controller.showStatusAndLog();
  assert.ok(client.logShown);
  assert.match(client.log.join('\n'), /"checkpoint": "default"/);
});
