# memoryd's hook, as the agents run it. `memoryd hooks install` writes
#
#     /bin/sh -c '<guard>' memoryd-hook <this file> <memoryd> hook --agent A --socket S \
#         --timeout T EVENT
#
# into their settings (through a guard that exits 0 when this file is missing; the file is
# memoryd's own copy in its state directory, `memoryd/hooks/script.py`). Starting an interpreter is most of what a Python hook costs (0.1 s
# of 0.12 on a slow machine), and an agent runs two or three hooks before its first
# request; curl starts in a hundredth of that. So this sends the agent's payload as it is
# to the daemon (`POST /v1/hook/<agent>/<event>`, memoryd/api/server.py) and prints the
# answer. Everything else goes to the Python hook (`memoryd hook`, memoryd/hooks/fast.py)
# with the same payload: no curl, no daemon (it then opens the stores itself), a daemon
# older than this file, any other arguments. Like the Python hook, it never hurts the
# agent: it exits 0, writes nothing on stderr, and prints nothing once its cap is spent.

memoryd=$1
shift
# An agent CLI memoryd itself runs as the distillation model (distill.providers sets
# MEMORYD_DISTILLING, as the Python hook reads it): no memory, and nothing to save.
[ -z "${MEMORYD_DISTILLING-}" ] || exit 0
# memoryd moved or was uninstalled: nothing to say, and never an error the agent acts on.
[ -x "$memoryd" ] || exit 0
if [ $# -ne 8 ] || [ "$1" != hook ] || [ "$2" != --agent ] || [ "$4" != --socket ] \
        || [ "$6" != --timeout ]; then
    exec "$memoryd" "$@"
fi
agent=$3 socket=$5 timeout=$7 event=$8
# MEMORYD_BRIEFING=off (names.BRIEFING_ENV): no block at a session's start or a prompt.
case ${MEMORYD_BRIEFING-} in
    off | OFF | Off | no | No | NO | 0 | false | False | FALSE)
        case $event in SessionStart | UserPromptSubmit | BeforeAgent) exit 0 ;; esac ;;
esac
# The folder the agent's environment moved its home to (names.AGENT_HOME_ENV): the
# daemon accepts transcripts there, and cannot see the agent's environment itself.
case $agent in
    claude) home=${CLAUDE_CONFIG_DIR-} ;;
    codex) home=${CODEX_HOME-} ;;
    gemini) home=${GEMINI_CLI_HOME-} ;;
    *) exec "$memoryd" "$@" ;;
esac
# A header carries the home as it is only without control characters and without
# blanks at its ends; any other is the Python hook's to send.
case $home in *[[:cntrl:]]* | [[:blank:]]* | *[[:blank:]]) exec "$memoryd" "$@" ;; esac
case $event in '' | *[!A-Za-z]*) exec "$memoryd" "$@" ;; esac
command -v curl >/dev/null 2>&1 || exec "$memoryd" "$@"

payload=$(cat)
[ -n "$payload" ] || payload='{}'

python_hook() {
    printf '%s' "$payload" | "$memoryd" hook --agent "$agent" --socket "$socket" \
        --timeout "$timeout" "$event"
    exit 0
}

log() {
    # One JSON line in hook.log beside the socket, as the Python hook writes them.
    [ -d "${socket%/*}" ] || return 0
    (umask 077 && printf '{"timestamp": "%s", "event": "%s", "agent": "%s", %s}\n' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$agent" "$2" >>"${socket%/*}/hook.log") \
        2>/dev/null
}

set -- --silent --unix-socket "$socket" --max-time "$timeout" \
    -H 'Content-Type: application/json' --data-binary @- --write-out '\n%{http_code}'
[ -z "$home" ] || set -- "$@" -H "X-Memoryd-Agent-Home: $home"
answer=$(printf '%s' "$payload" | curl "$@" \
    "http://memoryd/v1/hook/$agent/$event?timeout=$timeout" 2>/dev/null)
status=$?
case $status in
    0) ;;
    # The daemon is there but did not answer in time (hung, or stopped): nothing, as the
    # Python hook does; the daemon does not record a block it was too late to give.
    28) log hook_timed_out "\"seconds\": $timeout"; exit 0 ;;
    *) python_hook ;;
esac
nl='
'
code=${answer##*"$nl"}
body=${answer%"$nl"*}
case $code in
    200) printf '%s' "$body" ;;
    204) ;;
    404 | 405) python_hook ;;  # a daemon older than this file: no /v1/hook
    *) log hook_failed "\"error\": \"daemon answered $code\"" ;;
esac
exit 0
