# bash completion of ubiquityfs (installed by scripts/install): commands, their actions and options, then
# paths.
_ubiquityfs() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]:-} words
    if ((COMP_CWORD == 1)); then
        words="mount unmount status evict download pin unpin sync pause resume usage delete-data share check query kv trash history rewind chunks remote --help --version"
    else
        case "$cmd" in
            mount) words="--remote --token-file --ca-file --container --containers --all-containers --share --store --device --foreground --no-passthrough
                          --download-timeout --no-download-for --cache-size --min-free --help" ;;
            unmount|umount) words="--force --help" ;;
            status|history) words="--json --help" ;;
            download) words="--wait --help" ;;
            sync) words="--wait --timeout --help" ;;
            check) words="--store --repair --help" ;;
            query) words="--scope --name --container --live --json --help" ;;
            pause|resume) words="--help" ;;
            usage) words="--json --help" ;;
            delete-data) words="--documents --yes --help" ;;
            chunks) words="--json --summary --help" ;;
            rewind) words="--to --dry-run --help" ;;
            kv) ((COMP_CWORD == 2)) && words="get set delete list watch" || words="--json" ;;
            trash) ((COMP_CWORD == 2)) && words="list restore empty" || words="--json" ;;
            share) ((COMP_CWORD == 2)) && words="add remove list leave" || words="--read-only --json --help" ;;
            remote) ((COMP_CWORD == 2)) && words="serve seed usage user device" || words="--data --listen --metadata --blobs --help" ;;
        esac
    fi
    if [[ $cur == -* || ( -n $words && $cur != */* && ($COMP_CWORD == 1 || ($COMP_CWORD == 2 && $cmd =~ ^(kv|trash|share|remote)$)) ) ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
}
complete -o filenames -F _ubiquityfs ubiquityfs
