// Reads the `diceCopilot` settings section and splits it into what the client needs and what the server gets.
import { LaunchSettings } from './serverLaunch';

/** The only part of a VS Code WorkspaceConfiguration this module uses. */
export interface ConfigurationReader {
  get<T>(key: string): T | undefined;
}

/** Settings the server understands (server/PROTOCOL.md "Settings"); dotted keys become nested objects. */
export const SERVER_SETTING_KEYS = [
  'checkpoint',
  'device',
  'autoTrigger',
  'autoBudgetMs',
  'invokedBudgetMs',
  'maxCandidates',
  'strategy',
  'threshold',
  'maxNewTokens',
  'referenceModule',
  'validation.policy',
  'validation.atol',
  'validation.rtol',
  'validation.timing',
  'validation.timeoutS',
  'nvcc.path',
  'nvcc.flags',
  'nvcc.arch',
  'telemetry.enabled',
  'telemetry.path',
] as const;

export type ServerSettings = Record<string, unknown>;

/** The object sent as `{settings: {diceCopilot: ...}}`; keys the user left unset fall back to the contributed defaults
 * (null for the decoding settings: the server then takes the checkpoint's defaults). */
export function serverSettings(config: ConfigurationReader): ServerSettings {
  const settings: ServerSettings = {};
  for (const key of SERVER_SETTING_KEYS) {
    const value = config.get<unknown>(key);
    if (value === undefined) {
      continue;
    }
    const parts = key.split('.');
    let target = settings;
    for (const part of parts.slice(0, -1)) {
      target = (target[part] ??= {}) as ServerSettings;
    }
    target[parts[parts.length - 1]] = value;
  }
  return settings;
}

/** Client-only settings: how to start the server. */
export function launchSettings(config: ConfigurationReader): LaunchSettings {
  return {
    serverPath: config.get<string>('server.path') ?? 'dice-copilot',
    pythonPath: config.get<string>('server.pythonPath') ?? '',
    extraArgs: config.get<string[]>('server.extraArgs') ?? [],
  };
}
