--- :checkhealth dice_copilot — Neovim version, the server command, the checkpoint (and whether it is trained),
--- the GPU and nvcc.
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

local function read_file(path)
  local file = io.open(path, 'r')
  if not file then
    return nil
  end
  local text = file:read('*a')
  file:close()
  return text
end

local function unquote(text)
  return (vim.trim(text):gsub('^["\']', ''):gsub('["\']$', ''))
end

--- The `tags` of a model card's YAML metadata: `tags: x`, `tags: [x, y]` or a `- x` list below `tags:`.
---@param metadata string
---@return string[]
local function yaml_tags(metadata)
  local tags, in_list = {}, false
  for line in (metadata .. '\n'):gmatch('([^\n]*)\n') do
    local value = line:match('^tags:%s*(.-)%s*$')
    if value then
      in_list = value == ''
      for item in value:gsub('^%[', ''):gsub('%]$', ''):gmatch('[^,]+') do
        table.insert(tags, unquote(item))
      end
    elseif in_list and line:match('^%s*%-%s') then
      table.insert(tags, unquote((line:gsub('^%s*%-%s*', ''))))
    elseif not line:match('^%s') then
      in_list = false
    end
  end
  return tags
end

--- Where a checkpoint folder says it is untrained, by the rule of server/PROTOCOL.md (`untrained`) that the server
--- applies once it runs: config.json's `dice_copilot_untrained`, or the model card (README.md) naming it untrained
--- among the tags of its YAML metadata or in its title (a `# ` heading as its first line). nil when unmarked.
---@param dir string
---@return string|nil
local function untrained_mark(dir)
  local ok, config = pcall(vim.json.decode, read_file(vim.fs.joinpath(dir, 'config.json')) or '')
  if ok and type(config) == 'table' and config.dice_copilot_untrained == true then
    return 'marked in config.json'
  end
  local card = read_file(vim.fs.joinpath(dir, 'README.md'))
  if not card then
    return nil
  end
  card = card:gsub('\r\n', '\n')
  local metadata, body = card:match('^%-%-%-[ \t]*\n(.-)\n%-%-%-[ \t]*\n?(.*)$')
  if metadata then
    for _, tag in ipairs(yaml_tags(metadata)) do
      if tag:lower() == 'untrained' then
        return 'tagged so in its model card'
      end
    end
    card = body
  end
  local title = vim.trim(card):match('^[^\n]*')
  if title:match('^# ') and title:lower():find('%f[%w]untrained%f[^%w]') then
    return 'says its model card'
  end
  return nil
end

--- The embedded default checkpoint of the checkout this plugin lives in (its editors/neovim), if it is there.
---@return string|nil
local function embedded_checkpoint_dir()
  local here = debug.getinfo(1, 'S').source:gsub('^@', '')
  local root = vim.fn.fnamemodify(here, ':p:h:h:h:h:h')  -- lua/dice_copilot/health.lua under editors/neovim
  local dir = vim.fs.joinpath(root, 'model', 'default_checkpoint')
  return vim.fn.isdirectory(dir) == 1 and dir or nil
end

--- The running server's showStatus once it has loaded a checkpoint (its word is final), else nil.
---@return table|nil
local function served_checkpoint()
  local client = vim.lsp.get_clients({ name = 'dice_copilot' })[1]
  if not client then
    return nil
  end
  local response = client:request_sync('workspace/executeCommand',
    { command = 'diceCopilot.showStatus', arguments = { vim.empty_dict() } }, 5000)
  local result = response and response.result
  if type(result) ~= 'table' or (tonumber(result.loads) or 0) < 1 then
    return nil
  end
  return result
end

local TRAINED_ADVICE = 'Set settings.checkpoint in setup{} to a trained DICE checkpoint folder.'

local function check_checkpoint(settings)
  local served = served_checkpoint()
  if served then
    if served.untrained == true then
      health.warn(('checkpoint %s (serving now) is UNTRAINED: random weights, its suggestions are noise'):format(
        tostring(served.checkpoint)), TRAINED_ADVICE)
    else
      health.ok(('checkpoint %s (serving now)'):format(tostring(served.checkpoint)))
    end
    return
  end
  local checkpoint = settings.checkpoint
  if checkpoint == nil or checkpoint == vim.NIL or checkpoint == 'default' then
    -- The embedded default is the trained dice-tiny checkpoint; its folder, where found, says if it is not.
    local dir = embedded_checkpoint_dir()
    if not (dir and untrained_mark(dir)) then
      health.ok('checkpoint: the embedded default')
    else
      health.warn('checkpoint: the embedded default, which is UNTRAINED: random weights, its suggestions are noise',
        TRAINED_ADVICE)
    end
    return
  end
  local dir = vim.fs.normalize(checkpoint)
  local mark = vim.fn.isdirectory(dir) == 1 and untrained_mark(dir)
  if vim.fn.isdirectory(dir) == 0 then
    health.error(('checkpoint folder does not exist: %s'):format(dir), 'Fix settings.checkpoint in setup{}.')
  elseif vim.fn.filereadable(vim.fs.joinpath(dir, 'config.json')) == 0 then
    health.error(('checkpoint has no config.json: %s'):format(dir), 'Point settings.checkpoint at an HF-layout folder.')
  elseif mark then
    health.warn(('checkpoint %s is UNTRAINED (%s): its suggestions are noise'):format(dir, mark), TRAINED_ADVICE)
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
