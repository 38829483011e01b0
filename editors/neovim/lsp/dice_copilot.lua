--- LSP config for the DICE Copilot server (Neovim ≥ 0.11): `vim.lsp.enable('dice_copilot')`.
--- `require('dice_copilot').setup{}` overrides cmd / settings and sets keymaps; without it the defaults apply.
local config = require('dice_copilot.config')
local version = vim.version()

---@type vim.lsp.Config
return {
  cmd = config.server_cmd(config.options),
  filetypes = config.options.filetypes,
  root_markers = { 'pyproject.toml', 'setup.py', '.git' },
  init_options = {
    editorInfo = { name = 'neovim', version = ('%d.%d.%d'):format(version.major, version.minor, version.patch) },
    pluginInfo = { name = 'dice_copilot.nvim', version = '0.1.0' },
    settings = config.server_settings(config.options),
  },
  -- Answers workspace/configuration pulls of the `diceCopilot` section.
  settings = { diceCopilot = config.server_settings(config.options) },
  handlers = require('dice_copilot.handlers'),
  on_attach = function(client, bufnr)
    require('dice_copilot').on_attach(client, bufnr)
  end,
}
