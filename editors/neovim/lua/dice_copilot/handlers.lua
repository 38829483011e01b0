--- Handlers of the server's diceCopilot/* notifications (wired into the LSP config in lsp/dice_copilot.lua).
local status = require('dice_copilot.status')

return {
  ['diceCopilot/status'] = function(_, params)
    local was_loading = status.current.state == 'starting' or status.current.state == 'loadingModel'
    status.on_status(params)
    if was_loading and params.state == 'ready' then
      -- Requests made while the model loaded were answered empty: ask again where the user is typing.
      require('dice_copilot.suggestion').refresh(vim.api.nvim_get_current_buf())
    end
  end,
  ['diceCopilot/suggestionReady'] = function(_, params)
    require('dice_copilot.suggestion').on_suggestion_ready(params)
  end,
  ['diceCopilot/generationUpdate'] = function(_, params)
    status.on_generation_update(params, require('dice_copilot.config').options.notify_progress)
  end,
}
