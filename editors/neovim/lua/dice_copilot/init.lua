--- DICE Copilot for Neovim: validated CUDA kernel ghost text and whole-kernel generation from `dice-copilot serve`.
local config = require('dice_copilot.config')
local suggestion = require('dice_copilot.suggestion')
local status = require('dice_copilot.status')

local M = {}

M.CLIENT_NAME = 'dice_copilot'

--- Configures the server (cmd, settings), enables it, and creates the :Dice* commands.
---@param opts dice_copilot.Options|nil
function M.setup(opts)
  local options = config.apply(opts)
  vim.lsp.config(M.CLIENT_NAME, {
    cmd = config.server_cmd(options),
    filetypes = options.filetypes,
    settings = { diceCopilot = config.server_settings(options) },
    init_options = { settings = config.server_settings(options) },
  })
  require('dice_copilot.commands').create()
  local group = vim.api.nvim_create_augroup('dice_copilot.progress', { clear = true })
  vim.api.nvim_create_autocmd('LspProgress', {
    group = group,
    callback = function(event)
      local client = vim.lsp.get_client_by_id(event.data.client_id)
      local value = event.data.params and event.data.params.value or {}
      if client and client.name == M.CLIENT_NAME and options.notify_progress and value.kind ~= 'end' then
        local text = ('DICE %s%s'):format(value.title and (value.title .. ': ') or '', value.message or '')
        vim.api.nvim_echo({ { text, 'MoreMsg' } }, false, {})
      end
    end,
  })
  if options.enable then
    vim.lsp.enable(M.CLIENT_NAME)
  end
end

local function map(bufnr, lhs, action, desc)
  if not lhs then
    return
  end
  vim.keymap.set('i', lhs, function()
    if not action() then
      -- Nothing to act on: the key does what it would have done without the plugin.
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(lhs, true, false, true), 'n', false)
    end
  end, { buffer = bufnr, desc = 'DICE Copilot: ' .. desc })
end

--- Starts ghost text and the insert-mode keymaps in a buffer the server attached to.
function M.on_attach(client, bufnr)
  local options = config.options
  suggestion.attach(bufnr, client, options.ghost_text, options.debounce_ms)
  local keys = options.keymaps
  map(bufnr, keys.accept, function() return suggestion.accept('all') end, 'accept suggestion')
  map(bufnr, keys.accept_word, function() return suggestion.accept('word') end, 'accept next word')
  map(bufnr, keys.accept_line, function() return suggestion.accept('line') end, 'accept rest of line')
  map(bufnr, keys.next, function() return suggestion.cycle(1) end, 'next candidate')
  map(bufnr, keys.prev, function() return suggestion.cycle(-1) end, 'previous candidate')
  map(bufnr, keys.dismiss, function() return suggestion.dismiss() end, 'dismiss suggestion')
end

M.accept = function() return suggestion.accept('all') end
M.accept_word = function() return suggestion.accept('word') end
M.accept_line = function() return suggestion.accept('line') end
M.next = function() return suggestion.cycle(1) end
M.prev = function() return suggestion.cycle(-1) end
M.dismiss = suggestion.dismiss
M.is_visible = suggestion.is_visible

--- "DICE ready · not in a kernel · ✓ 2.4× vs torch", for a statusline.
M.statusline = status.statusline

return M
