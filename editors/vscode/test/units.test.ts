// Unit tests of the pure parts: server launch, settings forwarding, module lookup, status text.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { resolveServerLaunch, ServerNotFoundError } from '../src/serverLaunch';
import { launchSettings, serverSettings } from '../src/settings';
import { findModuleClassAt } from '../src/moduleLocator';
import { formatVerdict, StatusView } from '../src/statusView';

function fakeExecutable(name: string): { dir: string; file: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dice-launch-'));
  const file = path.join(dir, name);
  fs.writeFileSync(file, '#!/bin/sh\n', { mode: 0o755 });
  return { dir, file };
}

test('the server is found on PATH and started with `serve` plus extra args', () => {
  const { dir, file } = fakeExecutable('dice-copilot');
  const launch = resolveServerLaunch({ serverPath: 'dice-copilot', pythonPath: '', extraArgs: ['--log', 'x'] }, { PATH: dir });
  assert.deepEqual(launch, { command: file, args: ['serve', '--log', 'x'] });
});

test('a Python interpreter setting wins and runs the CLI module', () => {
  const { file } = fakeExecutable('python3');
  const launch = resolveServerLaunch({ serverPath: 'dice-copilot', pythonPath: file, extraArgs: [] }, { PATH: '' });
  assert.deepEqual(launch, { command: file, args: ['-m', 'dice_copilot.cli', 'serve'] });
});

test('a missing server gives a message naming the setting and the install command', () => {
  assert.throws(
    () => resolveServerLaunch({ serverPath: 'dice-copilot', pythonPath: '', extraArgs: [] }, { PATH: '/nonexistent' }),
    (error: unknown) =>
      error instanceof ServerNotFoundError &&
      error.message.includes('diceCopilot.server.path') &&
      error.message.includes('pip install dice-copilot'),
  );
  assert.throws(
    () => resolveServerLaunch({ serverPath: 'dice-copilot', pythonPath: '/no/python', extraArgs: [] }, { PATH: '' }),
    /diceCopilot\.server\.pythonPath/,
  );
});

test('server settings are nested by dotted key and exclude client-only keys', () => {
  const values: Record<string, unknown> = {
    checkpoint: '/ckpt',
    autoBudgetMs: 800,
    'validation.atol': 0.001,
    'validation.policy': 'strict',
    'nvcc.flags': ['-O3'],
    'server.path': '/usr/bin/dice-copilot',
  };
  const reader = { get: <T>(key: string) => values[key] as T | undefined };
  assert.deepEqual(serverSettings(reader), {
    checkpoint: '/ckpt',
    autoBudgetMs: 800,
    validation: { atol: 0.001, policy: 'strict' },
    nvcc: { flags: ['-O3'] },
  });
  assert.equal(launchSettings(reader).serverPath, '/usr/bin/dice-copilot');
  assert.equal(launchSettings(reader).pythonPath, '');
});

const PYTHON_SOURCE = [
  'import torch',
  'from torch import nn',
  '',
  'class Helper:',
  '    pass',
  '',
  'class Scale(nn.Module):',
  '    def __init__(self):',
  '        super().__init__()',
  '',
  '    def forward(self, x):',
  '        return x * 2',
  '',
  'class Other(torch.nn.Module):',
  '    def forward(self, x):',
  '        return x + 1',
  '',
  'def get_inputs():',
  '    return [torch.randn(4)]',
].join('\n');

test('the nn.Module class enclosing the cursor is found, and nothing outside one', () => {
  assert.deepEqual(findModuleClassAt(PYTHON_SOURCE, 11), { className: 'Scale', line: 6 });
  assert.deepEqual(findModuleClassAt(PYTHON_SOURCE, 6), { className: 'Scale', line: 6 });
  assert.deepEqual(findModuleClassAt(PYTHON_SOURCE, 15), { className: 'Other', line: 13 });
  assert.equal(findModuleClassAt(PYTHON_SOURCE, 4), undefined, 'a plain class is not a module');
  assert.equal(findModuleClassAt(PYTHON_SOURCE, 18), undefined, 'a top-level function is outside every class');
});

test('verdicts read as a user expects', () => {
  assert.equal(formatVerdict({ passed: true, stage: 'timed', speedup: 2.43 }), '✓ 2.4× vs torch');
  assert.equal(formatVerdict({ passed: true, stage: 'compile', compileOnly: true }), '✓ compiles (no GPU)');
  assert.equal(formatVerdict({ passed: true, stage: 'correct', compile_only: false, speedup: null }), '✓ correct');
  assert.equal(formatVerdict({ passed: false, failure: 'output mismatch: max abs error 0.3' }), '✗ output mismatch: max abs error 0.3');
});

test('the status bar shows state, the reason nothing was suggested, progress and the last verdict', () => {
  const item = { text: '', tooltip: undefined as string | object | undefined, shown: false, show() { this.shown = true; } };
  const view = new StatusView(item);
  assert.ok(item.shown);
  assert.match(item.text, /starting/);
  view.onStatus({ state: 'ready', message: 'model loaded', reason: 'notInKernel' });
  assert.equal(item.text, 'DICE $(check) ready · not in a kernel');
  view.onVerdict({ passed: true, stage: 'timed', speedup: 2.4, maxAbsError: 1e-5 });
  assert.equal(item.text, 'DICE $(check) ready · not in a kernel · ✓ 2.4× vs torch');
  assert.match(String(item.tooltip), /max abs error 1\.0e-5/);
  view.onStatus({ state: 'generating', message: 'generating', jobId: 'job-3' });
  view.onGenerationUpdate({ jobId: 'job-3', candidate: 2, total: 4, status: 'failed', failure: 'compile error' });
  assert.equal(view.currentJobId, 'job-3');
  assert.equal(item.text, 'DICE $(sync~spin) generating · candidate 2/4: ✗ compile error · ✓ 2.4× vs torch');
  view.onStatus({ state: 'ready', message: 'done', reason: 'ok' });
  assert.equal(view.currentJobId, undefined);
  assert.equal(item.text, 'DICE $(check) ready · ✓ 2.4× vs torch');
});

test('the status bar says when the checkpoint serving is untrained, until a trained one serves', () => {
  const item = { text: '', tooltip: undefined as string | object | undefined, shown: false, show() { this.shown = true; } };
  const view = new StatusView(item);
  view.onStatus({ state: 'ready', message: 'checkpoint default ready on cpu', reason: 'ok', untrained: true });
  assert.equal(item.text, 'DICE $(check) ready · $(warning) untrained');
  assert.match(String(item.tooltip), /untrained \(random weights\): its suggestions are noise/);
  assert.match(String(item.tooltip), /diceCopilot\.checkpoint/);
  view.onStatus({ state: 'ready', message: 'no suggestion', reason: 'notInKernel', untrained: true });
  assert.equal(item.text, 'DICE $(check) ready · $(warning) untrained · not in a kernel');
  view.onStatus({ state: 'ready', message: 'checkpoint /ck ready on cpu', reason: 'ok', untrained: false });
  assert.equal(item.text, 'DICE $(check) ready');
  assert.doesNotMatch(String(item.tooltip), /untrained/);
  view.onStatus({ state: 'ready', message: 'again', untrained: true });
  view.onServerStopped('language server stopped');
  assert.equal(item.text, 'DICE $(error) error');
});
