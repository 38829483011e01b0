--- Server state as the user sees it: status notifications, generation progress, verdicts, a statusline string.
local M = {}

---@class dice_copilot.Status
---@field state string      starting|loadingModel|ready|generating|validating|error
---@field message string
---@field reason string|nil why nothing was suggested
---@field job_id string|nil the running generation / validation job
---@field progress string|nil last per-candidate line of the running job
---@field last_verdict string|nil
---@field untrained boolean  the checkpoint serving is marked untrained: its suggestions are noise
M.current = { state = 'starting', message = 'not started', untrained = false }

--- Why nothing was suggested, in a few words (reason codes of server/PROTOCOL.md).
M.reason_text = {
  notInKernel = 'not in a kernel',
  modelLoading = 'model loading',
  timeout = 'still validating',
  validationFailed = 'no candidate passed',
  compileError = 'candidates did not compile',
  notChecked = 'cannot check here: see the message',
  superseded = 'superseded',
  noGpu = 'no GPU: compile-only',
  autoTriggerOff = 'auto trigger off',
  generationRunning = 'busy generating',
  checkpointError = 'checkpoint error',
  documentTooLarge = 'document too large',
  promptTooLong = 'prompt too long',
  internalError = 'internal error',
  cancelled = 'cancelled',
}

--- A number list (one entry per output) becomes its largest entry; vim.NIL becomes nil.
local function scalar(value)
  if type(value) == 'table' then
    local best
    for _, v in ipairs(value) do
      best = (best == nil or v > best) and v or best
    end
    return best
  end
  return value ~= vim.NIL and value or nil
end

--- "✓ 2.4× vs torch", "✓ compiles (no GPU)", "✓ correct" or "✗ <failure>"; accepts camelCase (accept/generate
--- results) and snake_case (the validator's Verdict JSON) fields.
---@param verdict table
---@return string
function M.format_verdict(verdict)
  local failure = scalar(verdict.failure)
  if not verdict.passed then
    return '✗ ' .. (failure or scalar(verdict.stage) or 'failed')
  end
  local compile_only = verdict.compileOnly
  if compile_only == nil then
    compile_only = verdict.compile_only
  end
  if compile_only == true then
    return '✓ compiles (no GPU)'
  end
  local speedup = scalar(verdict.speedup)
  if type(speedup) == 'number' then
    return ('✓ %.' .. (speedup < 10 and 1 or 0) .. 'f× vs torch'):format(speedup)
  end
  return '✓ correct'
end

--- The verdict line plus stage and max error, for messages.
---@param verdict table
---@return string
function M.describe_verdict(verdict)
  local parts = { M.format_verdict(verdict) }
  local stage = scalar(verdict.stage)
  if stage then
    table.insert(parts, 'stage ' .. stage)
  end
  local err = scalar(verdict.maxAbsError) or scalar(verdict.max_abs_error)
  if type(err) == 'number' then
    table.insert(parts, ('max abs error %.1e'):format(err))
  end
  return table.concat(parts, ', ')
end

local function changed()
  vim.api.nvim_exec_autocmds('User', { pattern = 'DiceCopilotStatus', modeline = false })
  vim.cmd.redrawstatus({ bang = true })
end

---@param params table diceCopilot/status
function M.on_status(params)
  local cur = M.current
  local was_error = cur.state == 'error' and cur.message == params.message
  cur.state = params.state
  cur.message = params.message or ''
  cur.untrained = params.untrained == true
  cur.reason = params.reason ~= 'ok' and params.reason or nil
  local busy = params.state == 'generating' or params.state == 'validating'
  cur.job_id = busy and params.jobId or nil
  if not busy then
    cur.progress = nil
  end
  if params.state == 'error' and not was_error then
    vim.notify('DICE Copilot: ' .. cur.message, vim.log.levels.ERROR)
  end
  changed()
end

---@param update table diceCopilot/generationUpdate
---@param notify boolean echo the line
function M.on_generation_update(update, notify)
  local cur = M.current
  cur.job_id = update.jobId
  local of = update.total and ('/' .. update.total) or ''
  local result = update.status == 'generated' and 'generated'
    or M.format_verdict(vim.tbl_extend('force', update, { passed = update.status == 'passed' }))
  cur.progress = ('candidate %d%s: %s'):format(update.candidate, of, result)
  if notify then
    vim.api.nvim_echo({ { ('DICE %s %s'):format(update.jobId, cur.progress), 'MoreMsg' } }, true, {})
  end
  changed()
end

---@param verdict table
function M.on_verdict(verdict)
  M.current.last_verdict = M.format_verdict(verdict)
  changed()
end

--- A short string for a statusline: `%{v:lua.require'dice_copilot'.statusline()}`, e.g.
--- "DICE ready · untrained · not in a kernel".
---@return string
function M.statusline()
  local cur = M.current
  local parts = { 'DICE ' .. cur.state }
  if cur.untrained then
    table.insert(parts, 'untrained')
  end
  if cur.progress then
    table.insert(parts, cur.progress)
  elseif cur.reason then
    table.insert(parts, M.reason_text[cur.reason] or cur.reason)
  end
  if cur.last_verdict then
    table.insert(parts, cur.last_verdict)
  end
  return table.concat(parts, ' · ')
end

return M
