#!/usr/bin/env bash
# Prepare a fresh GPU machine: the carried LSP wheels and this checkout, installed without network access.
# Usage (source it): source bench/device_setup.sh
# Parts of one command may run side by side: only the first installs.
if [ -e /tmp/dice-setup-done ]; then
    export PYTHONPATH=$(cat /tmp/dice-setup-done) PYTHONUNBUFFERED=1
    return 0 2>/dev/null || exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
if ! python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/tmp/dice-install.log 2>&1; then
    echo "editable install failed (see /tmp/dice-install.log); using a symlink shim" >&2
    mkdir -p /tmp/shim && cp -r dice_copilot /tmp/shim/
    for d in model validator server trainer; do ln -sfn "$PWD/$d" "/tmp/shim/dice_copilot/$d"; done
    export PYTHONPATH=/tmp/shim:/tmp/site
fi
export PYTHONUNBUFFERED=1
python3 -c "import dice_copilot.model.engine, torch; print('setup ok', torch.__version__, torch.cuda.get_device_name())"
echo "$PYTHONPATH" > /tmp/dice-setup-done
