--- Loaded at startup: the :Dice* commands exist even before setup() (they act on an attached dice_copilot client).
if vim.g.loaded_dice_copilot then
  return
end
vim.g.loaded_dice_copilot = true
require('dice_copilot.commands').create()
