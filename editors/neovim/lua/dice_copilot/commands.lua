--- :DiceGenerate, :DiceValidate, :DiceCancel and :DiceStatus: the server's diceCopilot.* commands from the editor.
local status = require('dice_copilot.status')

local M = {}

local CLIENT_NAME = 'dice_copilot'

local function notify(message, level)
  vim.notify('DICE Copilot: ' .. message, level or vim.log.levels.INFO)
end

--- The dice_copilot client of the current buffer (or any running one when `any_buffer`).
local function find_client(any_buffer)
  local client = vim.lsp.get_clients({ name = CLIENT_NAME, bufnr = 0 })[1]
  if not client and any_buffer then
    client = vim.lsp.get_clients({ name = CLIENT_NAME })[1]
  end
  if not client then
    notify('the language server is not attached to this buffer; see :checkhealth dice_copilot', vim.log.levels.ERROR)
  end
  return client
end

--- Runs a server command with one object argument; `on_result` gets the result, errors are shown.
local function run(client, command, argument, on_result)
  client:exec_cmd({ title = command, command = command, arguments = { argument } }, { bufnr = 0 },
    function(err, result)
      if err then
        notify(('%s failed: %s'):format(command, err.message or vim.inspect(err)), vim.log.levels.ERROR)
        return
      end
      on_result(result)
    end)
end

local function cursor_position(client)
  return vim.lsp.util.make_position_params(0, client.offset_encoding).position
end

--- The innermost `class X(...Module...)` whose body holds `row` (0-based) in `lines`; its name or nil.
---@param lines string[]
---@param row integer
---@return string|nil
function M.module_class_at(lines, row)
  for start = row, 0, -1 do
    local indent, name, bases = lines[start + 1]:match('^(%s*)class%s+([%a_][%w_]*)%s*%(([^)]*)%)%s*:')
    local is_module = false
    for base in (bases or ''):gmatch('[^,]+') do
      local trimmed = vim.trim(base)
      is_module = is_module or trimmed == 'Module' or trimmed:sub(-7) == '.Module'
    end
    if is_module then
      local last = start + 1
      while last < #lines and (vim.trim(lines[last + 1]) == '' or #lines[last + 1]:match('^%s*') > #indent) do
        last = last + 1
      end
      if row < last then
        return name
      end
    end
  end
  return nil
end

--- Neovim applies the server's `CreateFile {ignoreIfExists}` + insert to a buffer without creating the file on
--- disk: save that new buffer once (never over an existing file), then show it.
local function save_and_open_result(uri, open)
  local path = vim.uri_to_fname(uri)
  local bufnr = vim.fn.bufnr(path)
  if bufnr ~= -1 and vim.fn.filereadable(path) == 0 and vim.bo[bufnr].modified then
    vim.api.nvim_buf_call(bufnr, function()
      vim.cmd('silent noautocmd write')
    end)
  end
  if open and vim.api.nvim_buf_get_name(0) ~= path then
    vim.cmd.edit(vim.fn.fnameescape(path))
  end
end

function M.generate(class_name)
  local client = find_client(false)
  if not client then
    return
  end
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  class_name = class_name ~= '' and class_name or M.module_class_at(vim.api.nvim_buf_get_lines(0, 0, -1, false), row)
  if not class_name then
    notify('put the cursor inside a `class X(nn.Module)` or name it: :DiceGenerate X', vim.log.levels.WARN)
    return
  end
  local argument = { uri = vim.uri_from_bufnr(0), className = class_name, position = cursor_position(client) }
  notify(('generating a CUDA kernel for %s…'):format(class_name))
  run(client, 'diceCopilot.generateKernel', argument, function(result)
    if result.status == 'ok' and result.best then
      local verdict = vim.tbl_extend('force', { passed = true }, result.best)
      status.on_verdict(verdict)
      notify(('kernel for %s: %s → %s'):format(class_name, status.describe_verdict(verdict),
        vim.fn.fnamemodify(vim.uri_to_fname(result.best.uri), ':t')))
      save_and_open_result(result.best.uri, require('dice_copilot.config').options.open_generated)
    elseif result.status == 'cancelled' then
      notify(('generation for %s cancelled'):format(class_name))
    else
      notify(('no kernel for %s: %s'):format(class_name, result.message or result.status), vim.log.levels.WARN)
    end
  end)
end

function M.validate()
  local client = find_client(false)
  if not client then
    return
  end
  run(client, 'diceCopilot.validateKernel', { uri = vim.uri_from_bufnr(0), position = cursor_position(client) },
    function(result)
      status.on_verdict(result.verdict)
      notify(status.describe_verdict(result.verdict),
        result.verdict.passed and vim.log.levels.INFO or vim.log.levels.WARN)
    end)
end

function M.cancel(job_id)
  local client = find_client(true)
  if not client then
    return
  end
  job_id = job_id ~= '' and job_id or status.current.job_id
  run(client, 'diceCopilot.cancelJob', job_id and { jobId = job_id } or vim.empty_dict(), function(result)
    local cancelled = result and result.cancelled or {}
    notify(#cancelled > 0 and ('cancelled ' .. table.concat(cancelled, ', ')) or 'no job was running')
  end)
end

--- The lines :DiceStatus shows for a showStatus result.
function M.status_lines(result)
  local lines = { ('state: %s — %s'):format(result.state, result.message or '') }
  if result.untrained == true then
    table.insert(lines, 'checkpoint is untrained: random weights, its suggestions are noise '
      .. '(set settings.checkpoint to a trained DICE checkpoint)')
  end
  if result.reason then
    table.insert(lines, 'last reason: ' .. (status.reason_text[result.reason] or result.reason))
  end
  for _, key in ipairs({ 'checkpoint', 'device', 'gpu', 'compileOnly' }) do
    if result[key] ~= nil and result[key] ~= vim.NIL then
      table.insert(lines, ('%s: %s'):format(key, tostring(result[key])))
    end
  end
  for _, job in ipairs(result.jobs or {}) do
    table.insert(lines, 'job: ' .. (type(job) == 'table' and vim.json.encode(job) or tostring(job)))
  end
  if status.current.last_verdict then
    table.insert(lines, 'last verdict: ' .. status.current.last_verdict)
  end
  return lines
end

function M.show_status()
  local client = find_client(true)
  if not client then
    return
  end
  run(client, 'diceCopilot.showStatus', vim.empty_dict(), function(result)
    status.on_status(result)
    notify(table.concat(M.status_lines(result), '\n'))
  end)
end

--- Creates the user commands (idempotent).
function M.create()
  local create = vim.api.nvim_create_user_command
  create('DiceGenerate', function(args) M.generate(args.args) end,
    { nargs = '?', desc = 'DICE Copilot: generate a CUDA kernel for the nn.Module under the cursor (or named)' })
  create('DiceValidate', M.validate, { desc = 'DICE Copilot: validate the kernel under the cursor' })
  create('DiceCancel', function(args) M.cancel(args.args) end,
    { nargs = '?', desc = 'DICE Copilot: cancel the running job (or the named one)' })
  create('DiceStatus', M.show_status, { desc = 'DICE Copilot: show the server status' })
end

return M
