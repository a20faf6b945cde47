{#- `gb300lane render RECIPE --format docker-run`: a bash script that starts the lane's containers. Every value
    arrives shell-quoted (`parts`: the command's words, one option with its value per part, quoted by shlex). -#}
#!/usr/bin/env bash
# Rendered by gb300lane from recipe {{ lane.recipe }} (fingerprint {{ lane.fingerprint }}); edit the recipe, not this file.
# Starts the sidecar first (the main container connects to it at boot), then the main container.
set -euo pipefail
{% for c in containers %}

# {{ c.role }}: health {{ c.health_url }}
{{ c.parts[0] }}
{%- for part in c.parts[1:] %} \
  {{ part }}
{%- endfor %}

{% endfor %}
