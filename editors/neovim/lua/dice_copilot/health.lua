--- :checkhealth dice_copilot — Neovim version, the server command, the checkpoint, the GPU and nvcc.
local config = require('dice_copilot.config')

local M = {}

local health = vim.health

local function run(cmd)
  local ok, result = pcall(function()
    return vim.system(cmd, { text = true }):wait(20000)
  end)
  if not ok then
    return nil, tostring(result)
  end
  return result
end

local function check_neovim()
  local v = vim.version()
  if vim.fn.has('nvim-0.11') == 0 then
    health.error(('Neovim %d.%d is too old'):format(v.major, v.minor), 'Install Neovim 0.11 or newer.')
  elseif vim.lsp.inline_completion then
    health.ok(('Neovim %s: ghost text through vim.lsp.inline_completion'):format(tostring(v)))
  else
    health.ok(("Neovim %s: ghost text through the plugin's own extmarks (0.12 adds core inline completion)"):format(
      tostring(v)))
  end
end

local function check_server(cmd)
  local exe = vim.fn.exepath(cmd[1])
  if exe == '' then
    health.error(('server command not found: %s'):format(cmd[1]), {
      'pip install dice-copilot (or `pip install -e .` in a checkout)',
      "or setup{ cmd = {'/path/to/dice-copilot', 'serve'} } / setup{ python = '/path/to/python' }",
    })
    return
  end
  local help_cmd = vim.list_extend(vim.list_slice(cmd, 1, #cmd), { '--help' })
  local result, err = run(help_cmd)
  if result and result.code == 0 then
    health.ok(('server: %s (%s)'):format(table.concat(cmd, ' '), exe))
  else
    health.error(('`%s` failed: %s'):format(table.concat(help_cmd, ' '),
      err or vim.trim((result.stderr or '') .. (result.stdout or ''))),
      'Reinstall dice-copilot in the environment the command comes from.')
  end
  local client = vim.lsp.get_clients({ name = 'dice_copilot' })[1]
  if client then
    health.info(('running: client %d, %s'):format(client.id, require('dice_copilot.status').statusline()))
  else
    health.info('no dice_copilot client is running (open a .cu or .py file)')
  end
end

local function check_checkpoint(settings)
  local checkpoint = settings.checkpoint
  if checkpoint == nil or checkpoint == vim.NIL or checkpoint == 'default' then
    health.ok('checkpoint: the embedded default (set settings.checkpoint to use a trained one)')
    return
  end
  local dir = vim.fs.normalize(checkpoint)
  if vim.fn.isdirectory(dir) == 0 then
    health.error(('checkpoint folder does not exist: %s'):format(dir), 'Fix settings.checkpoint in setup{}.')
  elseif vim.fn.filereadable(vim.fs.joinpath(dir, 'config.json')) == 0 then
    health.error(('checkpoint has no config.json: %s'):format(dir), 'Point settings.checkpoint at an HF-layout folder.')
  else
    health.ok('checkpoint: ' .. dir)
  end
end

local function check_gpu()
  if vim.fn.executable('nvidia-smi') == 0 then
    health.warn('no NVIDIA GPU found (nvidia-smi missing): suggestions are compile-checked only, without '
      .. 'numeric checks or speedups')
    return
  end
  local result = run({ 'nvidia-smi', '-L' })
  if result and result.code == 0 and vim.trim(result.stdout) ~= '' then
    health.ok('GPU: ' .. vim.trim(result.stdout):gsub('\n', '; '))
  else
    health.warn('nvidia-smi found no usable GPU: suggestions are compile-checked only')
  end
end

local function check_nvcc(settings)
  local nvcc = settings.nvcc and settings.nvcc.path
  nvcc = (nvcc and nvcc ~= vim.NIL) and nvcc or 'nvcc'
  if vim.fn.executable(nvcc) == 0 then
    health.error(('nvcc not found: %s'):format(nvcc), 'Install the CUDA toolkit or set settings.nvcc.path.')
    return
  end
  local result = run({ nvcc, '--version' })
  local lines = result and vim.split(vim.trim(result.stdout or ''), '\n') or {}
  health.ok(('nvcc: %s (%s)'):format(vim.fn.exepath(nvcc), lines[#lines] or 'version unknown'))
end

function M.check()
  local options = config.options
  health.start('dice_copilot: editor')
  check_neovim()
  health.start('dice_copilot: language server')
  check_server(config.server_cmd(options))
  check_checkpoint(options.settings)
  health.start('dice_copilot: GPU and compiler')
  check_gpu()
  check_nvcc(options.settings)
end

return M
