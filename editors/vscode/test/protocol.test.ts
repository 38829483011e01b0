// Drives the real `dice-copilot serve` over stdio with vscode-languageserver-protocol, the wire code of
// vscode-languageclient: what VS Code would see. Skips (with the reason) only when the server can't be started.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import {
  createProtocolConnection,
  InitializeRequest,
  InlineCompletionRequest,
  InlineCompletionTriggerKind,
  StreamMessageReader,
  StreamMessageWriter,
} from 'vscode-languageserver-protocol/node';
import { findExecutable } from '../src/serverLaunch';

const SERVER_COMMANDS = [
  'diceCopilot.didAccept',
  'diceCopilot.generateKernel',
  'diceCopilot.validateKernel',
  'diceCopilot.cancelJob',
  'diceCopilot.showStatus',
];

const KERNEL_FILE = [
  '#include <cuda_runtime.h>',
  '',
  'int host_helper(int x) { return x + 1; }',
  '',
  '__global__ void scale(float* y, const float* x, int n) {',
  '    int i = blockIdx.x * blockDim.x + threadIdx.x;',
  '}',
  '',
].join('\n');

/** `DICE_COPILOT_SERVER` names the executable; else `dice-copilot` on PATH. Undefined when `serve` is unusable. */
function serverExecutable(): { path?: string; reason?: string } {
  const name = process.env.DICE_COPILOT_SERVER ?? 'dice-copilot';
  const found = findExecutable(name);
  if (!found) {
    return { reason: `${name} not found on PATH (pip install -e . at the repository root)` };
  }
  const help = spawnSync(found, ['serve', '--help'], { encoding: 'utf8', timeout: 60_000 });
  if (help.status !== 0) {
    return { reason: `\`${name} serve --help\` failed (exit ${help.status}): the server is not available yet` };
  }
  return { path: found };
}

const server = serverExecutable();
// The repository's untrained stand-in checkpoint (npm runs in editors/vscode): small enough to load in a test, and
// marked untrained, which the statuses must say.
const STAND_IN = path.resolve(process.cwd(), '..', '..', 'tests', 'fixtures', 'untrained_checkpoint');

test('the real server speaks inline completion and the diceCopilot commands', { skip: server.reason, timeout: 150_000 }, async () => {
  const workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'dice-protocol-'));
  const kernelPath = path.join(workspace, 'scale.cu');
  fs.writeFileSync(kernelPath, KERNEL_FILE);
  const child = spawn(server.path!, ['serve'], {
    cwd: workspace,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, DICE_COPILOT_CHECKPOINT: STAND_IN },
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const connection = createProtocolConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  const statuses: Array<{ state: string; reason?: string; untrained?: boolean }> = [];
  connection.onNotification('diceCopilot/status', (params: { state: string; reason?: string; untrained?: boolean }) => {
    statuses.push(params);
  });
  connection.onRequest('workspace/configuration', (params: { items: unknown[] }) => params.items.map(() => ({ device: 'cpu' })));
  connection.onRequest('client/registerCapability', () => null);
  connection.onRequest('window/workDoneProgress/create', () => null);
  connection.listen();
  try {
    const init = await connection.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: `file://${workspace}`,
      workspaceFolders: [{ uri: `file://${workspace}`, name: 'w' }],
      capabilities: {
        textDocument: { inlineCompletion: { dynamicRegistration: false }, synchronization: { dynamicRegistration: false } },
        workspace: { configuration: true, didChangeConfiguration: { dynamicRegistration: false } },
      },
      initializationOptions: { editorInfo: { name: 'protocol-test', version: '0' }, settings: { device: 'cpu' } },
    });
    assert.ok(init.capabilities.inlineCompletionProvider, 'inlineCompletionProvider is advertised');
    for (const command of SERVER_COMMANDS) {
      assert.ok(init.capabilities.executeCommandProvider?.commands.includes(command), `${command} is advertised`);
    }
    await connection.sendNotification('initialized', {});
    const uri = `file://${kernelPath}`;
    await connection.sendNotification('textDocument/didOpen', {
      textDocument: { uri, languageId: 'cuda-cpp', version: 1, text: KERNEL_FILE },
    });

    const started = Date.now();
    const result = await connection.sendRequest(InlineCompletionRequest.type, {
      textDocument: { uri },
      position: { line: 2, character: 30 },
      context: { triggerKind: InlineCompletionTriggerKind.Invoked },
    });
    const items = result === null ? [] : Array.isArray(result) ? result : result.items;
    assert.deepEqual(items, [], 'no suggestion outside a kernel body');
    assert.ok(Date.now() - started < 5_000, 'the outside-a-kernel answer is immediate');
    const deadline = Date.now() + 5_000;
    while (!statuses.some((s) => s.reason === 'notInKernel') && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.ok(statuses.some((s) => s.reason === 'notInKernel'), `status says why: ${JSON.stringify(statuses)}`);

    // The stand-in checkpoint (no checkpoint setting: DICE_COPILOT_CHECKPOINT) is untrained: once it serves, every
    // status says so.
    const loaded = Date.now() + 90_000;
    while (!statuses.some((s) => s.state === 'ready' && s.reason === 'ok') && Date.now() < loaded) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const ready = statuses.filter((s) => s.state === 'ready' && s.reason === 'ok');
    assert.ok(ready.length > 0, `the stand-in checkpoint loads: ${JSON.stringify(statuses)}`);
    assert.equal(ready[ready.length - 1].untrained, true, 'the ready status says the stand-in checkpoint is untrained');
    assert.ok(statuses.every((s) => typeof s.untrained === 'boolean'), 'every status carries untrained');
    const status = await connection.sendRequest<{ state: string; untrained: boolean }>('workspace/executeCommand', {
      command: 'diceCopilot.showStatus',
      arguments: [{}],
    });
    assert.equal(status.state, 'ready');
    assert.equal(status.untrained, true);

    await connection.sendRequest('shutdown');
    await connection.sendNotification('exit');
    assert.equal(await exited, 0, `server exit code (stderr: ${stderr.slice(-2000)})`);
  } finally {
    connection.dispose();
    child.kill();
    fs.rmSync(workspace, { recursive: true, force: true });
  }
});
