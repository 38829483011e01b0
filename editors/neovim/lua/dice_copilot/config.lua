--- Options of the DICE Copilot Neovim plugin: defaults, and the merge that `setup()` applies.
local M = {}

---@class dice_copilot.Keymaps
---@field accept string|false        accept the whole suggestion
---@field accept_word string|false   accept the next word of it
---@field accept_line string|false   accept the rest of its current line
---@field next string|false          show the next candidate
---@field prev string|false          show the previous candidate
---@field dismiss string|false       hide the suggestion

---@class dice_copilot.Options
---@field cmd string[]|nil           server command; default {'dice-copilot', 'serve'}
---@field python string|nil          a Python with dice-copilot installed: runs `<python> -m dice_copilot.cli serve`
---@field filetypes string[]         where the server attaches
---@field settings table             the `diceCopilot` settings section sent to the server (server/PROTOCOL.md)
---@field ghost_text 'auto'|'core'|'plugin'  'auto' uses vim.lsp.inline_completion when present (0.12+)
---@field debounce_ms integer        delay of the plugin's own requests (the core one is fixed at 200 ms)
---@field keymaps dice_copilot.Keymaps  insert-mode keys, buffer-local; false disables one
---@field open_generated boolean     show the file a generation wrote (if the server did not already)
---@field notify_progress boolean    echo generation progress and per-candidate results
---@field enable boolean             call vim.lsp.enable('dice_copilot') in setup()
M.defaults = {
  cmd = nil,
  python = nil,
  filetypes = { 'cuda', 'python' },
  settings = {},
  ghost_text = 'auto',
  debounce_ms = 150,
  keymaps = {
    accept = '<M-l>',
    accept_word = '<M-w>',
    accept_line = '<M-j>',
    next = '<M-]>',
    prev = '<M-[>',
    dismiss = '<C-]>',
  },
  open_generated = true,
  notify_progress = true,
  enable = true,
}

---@type dice_copilot.Options
M.options = vim.deepcopy(M.defaults)

--- The server command line the options describe.
---@param options dice_copilot.Options
---@return string[]
function M.server_cmd(options)
  if options.python then
    return { options.python, '-m', 'dice_copilot.cli', 'serve' }
  end
  return options.cmd or { 'dice-copilot', 'serve' }
end

--- The `diceCopilot` settings object for the wire: an empty table must encode as `{}`, not `[]`.
---@param options dice_copilot.Options
---@return table
function M.server_settings(options)
  return next(options.settings) == nil and vim.empty_dict() or options.settings
end

--- Merges user options over the defaults, rejecting unknown keys with a message that names them.
---@param user table|nil
---@return dice_copilot.Options
function M.apply(user)
  user = user or {}
  local known = vim.list_extend({ 'cmd', 'python' }, vim.tbl_keys(M.defaults))
  for key in pairs(user) do
    if not vim.tbl_contains(known, key) then
      error(('dice_copilot.setup: unknown option %q (known: %s)'):format(key, table.concat(known, ', ')), 0)
    end
  end
  local valid_modes = { auto = true, core = true, plugin = true }
  if user.ghost_text and not valid_modes[user.ghost_text] then
    error(("dice_copilot.setup: ghost_text must be 'auto', 'core' or 'plugin', got %q"):format(
      tostring(user.ghost_text)), 0)
  end
  M.options = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), user)
  return M.options
end

return M
