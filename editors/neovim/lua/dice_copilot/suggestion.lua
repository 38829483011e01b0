--- Ghost-text suggestions: Neovim 0.12's vim.lsp.inline_completion when present, the plugin's own extmarks on 0.11.
--- Both paths share accept / accept-word / accept-line / next / prev / dismiss and the suggestionReady re-request.
local M = {}

local api = vim.api
local METHOD = 'textDocument/inlineCompletion'
local AUTOMATIC, INVOKED = 2, 1
local ns = api.nvim_create_namespace('dice_copilot.ghost')

---@class dice_copilot.BufferState
---@field mode 'core'|'plugin'
---@field client_id integer
---@field debounce_ms integer
---@field items table[]|nil     inline completion items of the last answer (plugin mode)
---@field index integer         the shown item (plugin mode)
---@field start integer[]|nil   {row, col} (0-based, bytes) where the items' text begins (plugin mode)
---@field request_id integer|nil
---@field timer uv.uv_timer_t|nil
---@field augroup integer|nil

---@type table<integer, dice_copilot.BufferState>
M.buffers = {}

api.nvim_set_hl(0, 'DiceCopilotGhost', { default = true, link = 'Comment' })
api.nvim_set_hl(0, 'DiceCopilotGhostIndex', { default = true, link = 'MoreMsg' })

--- True when this Neovim has core inline completion (0.12+).
function M.core_available()
  return vim.lsp.inline_completion ~= nil
end

--- Splits the next word (with the whitespace before it) or the rest of the line off a suggestion.
---@param text string
---@param kind 'word'|'line'
---@return string accepted, string rest
function M.split_partial(text, kind)
  local piece
  if kind == 'word' then
    piece = text:match('^%s*[%w_]+') or text:match('^%s*[^%w_%s]+') or text:match('^%s+') or text
  else
    piece = text:match('^\n[^\n]*') or text:match('^[^\n]+') or text
  end
  return piece, text:sub(#piece + 1)
end

local function insert_text_of(item)
  local text = item.insertText or item.insert_text
  if type(text) == 'table' then
    text = text.value
  end
  return text or ''
end

--- The part of `text` not yet in the buffer, when the buffer between `start` and the cursor is a prefix of it.
---@return string|nil
local function remaining_text(bufnr, text, start)
  local row, col = unpack(api.nvim_win_get_cursor(0))
  row = row - 1
  if row < start[1] or (row == start[1] and col < start[2]) then
    return nil
  end
  local typed = table.concat(api.nvim_buf_get_text(bufnr, start[1], start[2], row, col, {}), '\n')
  if text:sub(1, #typed) ~= typed then
    return nil
  end
  return text:sub(#typed + 1)
end

local function insert_at_cursor(bufnr, piece)
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local lines = vim.split(piece, '\n', { plain = true })
  api.nvim_buf_set_text(bufnr, row - 1, col, row - 1, col, lines)
  local end_col = (#lines == 1 and col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { row + #lines - 1, end_col })
end

local function accept_args(command)
  return command and command.arguments and command.arguments[1] or nil
end

--- Inserts all or part of an item's text; runs the item's command on a full accept and reports a partial one.
---@param text string the not-yet-inserted text
---@param command table|nil the item's lsp.Command (diceCopilot.didAccept)
---@param kind 'all'|'word'|'line'
---@param accepted_before string text of this item already in the buffer
---@return boolean whole the item is now fully inserted
local function apply_accept(bufnr, client, text, command, kind, accepted_before)
  local piece = kind == 'all' and text or M.split_partial(text, kind)
  insert_at_cursor(bufnr, piece)
  local whole = piece == text
  local args = accept_args(command)
  if whole and command then
    client:exec_cmd(command, { bufnr = bufnr })
  elseif args and args.id then
    client:notify('diceCopilot/didPartiallyAcceptCompletion', {
      id = args.id,
      acceptedLength = vim.str_utfindex(accepted_before .. piece, 'utf-16'),
    })
  end
  if whole and args and args.verdict then
    require('dice_copilot.status').on_verdict(args.verdict)
  end
  return whole
end

-- Plugin renderer (Neovim 0.11, or ghost_text = 'plugin') ---------------------------------------------------

local function clear(bufnr)
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
  end
end

local function stop_timer(state)
  if state.timer then
    state.timer:stop()
    state.timer:close()
    state.timer = nil
  end
end

local function cancel_request(state)
  local client = vim.lsp.get_client_by_id(state.client_id)
  if client and state.request_id then
    client:cancel_request(state.request_id)
  end
  state.request_id = nil
end

--- Draws the current item after the cursor; returns false (and draws nothing) when it no longer fits the buffer.
local function render(bufnr, state, show_index)
  clear(bufnr)
  local item = state.items and state.items[state.index]
  if not item or api.nvim_get_current_buf() ~= bufnr then
    return false
  end
  local text = remaining_text(bufnr, insert_text_of(item), state.start)
  if not text or text == '' then
    return false
  end
  local lines = vim.split(text, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], 'DiceCopilotGhost' } }
  end
  local first = { { lines[1], 'DiceCopilotGhost' } }
  if show_index and #state.items > 1 then
    local target = #virt_lines > 0 and virt_lines[#virt_lines] or first
    target[#target + 1] = { (' (%d/%d)'):format(state.index, #state.items), 'DiceCopilotGhostIndex' }
  end
  local row, col = unpack(api.nvim_win_get_cursor(0))
  api.nvim_buf_set_extmark(bufnr, ns, row - 1, col, {
    virt_text = first,
    virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
  })
  return true
end

local function item_start(bufnr, item, client, fallback)
  if not item.range then
    return fallback
  end
  local pos = item.range.start
  local line = api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1] or ''
  return { pos.line, vim.str_byteindex(line, client.offset_encoding, pos.character, false) }
end

--- Sends an inline completion request for the cursor, superseding the previous one of this buffer.
local function request(bufnr, state, kind)
  local client = vim.lsp.get_client_by_id(state.client_id)
  if not client or api.nvim_get_current_buf() ~= bufnr then
    return
  end
  cancel_request(state)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = kind }
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local asked_at = { row - 1, col }
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local id ---@type integer? (assigned below, read by the callback once the answer arrives)
  id = select(2, client:request(METHOD, params, function(err, result)
    if state.request_id == id then
      state.request_id = nil
    end
    if err or not result or not api.nvim_buf_is_valid(bufnr) then
      return
    end
    local now_row, now_col = unpack(api.nvim_win_get_cursor(0))
    if api.nvim_buf_get_changedtick(bufnr) ~= tick or now_row - 1 ~= asked_at[1] or now_col ~= asked_at[2] then
      return -- the buffer moved on; a newer request is (or will be) on its way
    end
    local items = result.items or result
    if #items == 0 then
      return
    end
    state.items = items
    state.index = 1
    state.start = item_start(bufnr, items[1], client, asked_at)
    render(bufnr, state, false)
  end, bufnr))
  state.request_id = id
end

local function schedule_request(bufnr, state)
  stop_timer(state)
  state.timer = vim.defer_fn(function()
    state.timer = nil
    if M.buffers[bufnr] == state and api.nvim_get_mode().mode:sub(1, 1) == 'i' then
      request(bufnr, state, AUTOMATIC)
    end
  end, state.debounce_ms)
end

local function plugin_dismiss(bufnr, state)
  stop_timer(state)
  cancel_request(state)
  state.items = nil
  clear(bufnr)
end

local function plugin_attach(bufnr, state)
  state.augroup = api.nvim_create_augroup('dice_copilot.ghost.' .. bufnr, { clear = true })
  api.nvim_create_autocmd({ 'InsertEnter', 'CursorMovedI', 'TextChangedI' }, {
    group = state.augroup,
    buffer = bufnr,
    callback = function()
      -- Typing along the shown suggestion keeps it (minus what was typed); anything else asks again.
      if not render(bufnr, state, false) then
        state.items = nil
        schedule_request(bufnr, state)
      end
    end,
  })
  api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = state.augroup,
    buffer = bufnr,
    callback = function()
      plugin_dismiss(bufnr, state)
    end,
  })
end

-- Public API --------------------------------------------------------------------------------------------------

--- Starts ghost text in `bufnr` for the client (called on LspAttach).
---@param mode 'auto'|'core'|'plugin'
function M.attach(bufnr, client, mode, debounce_ms)
  if mode == 'core' and not M.core_available() then
    vim.notify_once("DICE Copilot: ghost_text = 'core' needs Neovim 0.12+; using the plugin's own ghost text",
      vim.log.levels.WARN)
  end
  local use_core = mode ~= 'plugin' and M.core_available()
  local state = { mode = use_core and 'core' or 'plugin', client_id = client.id, debounce_ms = debounce_ms, index = 1 }
  M.detach(bufnr)
  M.buffers[bufnr] = state
  if use_core then
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  else
    plugin_attach(bufnr, state)
  end
end

function M.detach(bufnr)
  local state = M.buffers[bufnr]
  if not state then
    return
  end
  if state.mode == 'core' then
    vim.lsp.inline_completion.enable(false, { bufnr = bufnr })
  else
    plugin_dismiss(bufnr, state)
    pcall(api.nvim_del_augroup_by_id, state.augroup)
  end
  M.buffers[bufnr] = nil
end

--- True when a suggestion is on screen in the current buffer.
function M.is_visible()
  local bufnr = api.nvim_get_current_buf()
  local state = M.buffers[bufnr]
  if not state then
    return false
  end
  local namespace = state.mode == 'core' and api.nvim_create_namespace('nvim.lsp.inline_completion') or ns
  return #api.nvim_buf_get_extmarks(bufnr, namespace, 0, -1, { limit = 1 }) > 0
end

--- Accepts all, the next word or the rest of the line of the shown suggestion; false when none is shown.
---@param kind 'all'|'word'|'line'
---@return boolean
function M.accept(kind)
  local bufnr = api.nvim_get_current_buf()
  local state = M.buffers[bufnr]
  if not state or not M.is_visible() then
    return false
  end
  local client = assert(vim.lsp.get_client_by_id(state.client_id))
  if state.mode == 'core' then
    return vim.lsp.inline_completion.get({
      bufnr = bufnr,
      on_accept = function(item)
        local start = item.range and { item.range.start.row, item.range.start.col }
        if not start then
          local row, col = unpack(api.nvim_win_get_cursor(0))
          start = { row - 1, col }
        end
        local text = remaining_text(bufnr, insert_text_of(item), start)
        if text and text ~= '' then
          local typed = insert_text_of(item):sub(1, #insert_text_of(item) - #text)
          apply_accept(bufnr, client, text, item.command, kind, typed)
        end
      end,
    })
  end
  local item = state.items[state.index]
  local text = remaining_text(bufnr, insert_text_of(item), state.start)
  if not text or text == '' then
    return false
  end
  local typed = insert_text_of(item):sub(1, #insert_text_of(item) - #text)
  if apply_accept(bufnr, client, text, item.command, kind, typed) then
    plugin_dismiss(bufnr, state)
  else
    render(bufnr, state, false)
  end
  return true
end

--- Shows the next (`count` > 0) or previous candidate.
function M.cycle(count)
  local bufnr = api.nvim_get_current_buf()
  local state = M.buffers[bufnr]
  if not state then
    return false
  end
  if state.mode == 'core' then
    vim.lsp.inline_completion.select({ bufnr = bufnr, count = count })
    return true
  end
  if not state.items or #state.items == 0 then
    request(bufnr, state, INVOKED)
    return true
  end
  state.index = (state.index - 1 + count) % #state.items + 1
  return render(bufnr, state, true)
end

--- Hides the suggestion and drops pending requests.
function M.dismiss()
  local bufnr = api.nvim_get_current_buf()
  local state = M.buffers[bufnr]
  if not state then
    return false
  end
  local visible = M.is_visible()
  if state.mode == 'core' then
    -- Core has no public "abort"; re-enabling destroys the completor and its shown item.
    vim.lsp.inline_completion.enable(false, { bufnr = bufnr })
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  else
    plugin_dismiss(bufnr, state)
  end
  return visible
end

--- Asks again for the cursor of `bufnr` when it is the current buffer in insert mode (plugin: a new request;
--- core: its CursorMovedI handler, in its augroup named per runtime/lua/vim/lsp/_capability.lua).
---@param bufnr integer
function M.refresh(bufnr)
  local state = M.buffers[bufnr]
  if not state or bufnr ~= api.nvim_get_current_buf() or api.nvim_get_mode().mode:sub(1, 1) ~= 'i' then
    return
  end
  if state.mode == 'plugin' then
    request(bufnr, state, AUTOMATIC)
    return
  end
  local group = ('nvim.lsp.inline_completion:%d'):format(bufnr)
  if pcall(api.nvim_get_autocmds, { group = group }) then
    api.nvim_exec_autocmds('CursorMovedI', { group = group, buffer = bufnr, modeline = false })
  else
    api.nvim_exec_autocmds('CursorMovedI', { buffer = bufnr, modeline = false })
  end
end

--- The server finished a suggestion an earlier request gave up waiting for: ask again (a cache hit now), unless
--- the buffer changed since.
---@param params table diceCopilot/suggestionReady
function M.on_suggestion_ready(params)
  local bufnr = vim.uri_to_bufnr(params.uri)
  if params.version and vim.lsp.util.buf_versions[bufnr] ~= params.version then
    return
  end
  M.refresh(bufnr)
end

return M
