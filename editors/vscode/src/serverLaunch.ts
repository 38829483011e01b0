// Works out how to start `dice-copilot serve` from the user's settings, with an actionable error when it can't.
import * as fs from 'fs';
import * as path from 'path';

export interface LaunchSettings {
  /** The `dice-copilot` executable (a name looked up on PATH, or a path). */
  serverPath: string;
  /** A Python interpreter with dice-copilot installed; when set it wins over `serverPath`. */
  pythonPath: string;
  /** Extra arguments appended after `serve`. */
  extraArgs: string[];
}

export interface ServerLaunch {
  command: string;
  args: string[];
}

export class ServerNotFoundError extends Error {}

function isExecutableFile(candidate: string): boolean {
  try {
    fs.accessSync(candidate, fs.constants.X_OK);
    return fs.statSync(candidate).isFile();
  } catch {
    return false;
  }
}

/** Finds `name` like a shell would: a path is checked as is, a bare name is searched on PATH. */
export function findExecutable(name: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const expanded = name.startsWith('~/') ? path.join(env.HOME ?? '', name.slice(2)) : name;
  if (expanded.includes('/') || expanded.includes('\\')) {
    return isExecutableFile(expanded) ? path.resolve(expanded) : undefined;
  }
  const extensions = process.platform === 'win32' ? (env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';') : [''];
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (!dir) {
      continue;
    }
    for (const ext of extensions) {
      const candidate = path.join(dir, expanded + ext);
      if (isExecutableFile(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

/** Returns the command line of the language server, or throws ServerNotFoundError saying what to set. */
export function resolveServerLaunch(settings: LaunchSettings, env: NodeJS.ProcessEnv = process.env): ServerLaunch {
  const extra = settings.extraArgs ?? [];
  if (settings.pythonPath.trim()) {
    const python = findExecutable(settings.pythonPath.trim(), env);
    if (!python) {
      throw new ServerNotFoundError(
        `DICE Copilot: the Python interpreter "${settings.pythonPath}" (setting diceCopilot.server.pythonPath) ` +
          'does not exist or is not executable. Point it at the interpreter of the environment where you ran ' +
          '`pip install dice-copilot`, or clear it to use diceCopilot.server.path.',
      );
    }
    return { command: python, args: ['-m', 'dice_copilot.cli', 'serve', ...extra] };
  }
  const name = settings.serverPath.trim() || 'dice-copilot';
  const executable = findExecutable(name, env);
  if (!executable) {
    throw new ServerNotFoundError(
      `DICE Copilot: cannot find the language server "${name}" (setting diceCopilot.server.path) on PATH. ` +
        'Install it with `pip install dice-copilot` (or `pip install -e .` in a checkout), then set ' +
        'diceCopilot.server.path to the full path of `dice-copilot`, or diceCopilot.server.pythonPath to the ' +
        "Python interpreter of that environment.",
    );
  }
  return { command: executable, args: ['serve', ...extra] };
}
