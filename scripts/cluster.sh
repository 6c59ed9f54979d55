#!/usr/bin/env bash
# A single-node cluster on this machine, from Debian's packages: munge, SLURM (slurmctld + slurmd with this
# machine's CPUs and memory) and an MLflow tracking server on PostgreSQL, all on 127.0.0.1.
#
#   bash scripts/cluster.sh up      # start everything (idempotent); prints the variables to export
#   bash scripts/cluster.sh check   # sbatch a one-line job and wait for it; ask the tracking server for experiments
#   bash scripts/cluster.sh down    # stop everything (the state folder stays: `up` brings back the same store)
#
# Needs: apt-get install slurm-wlm munge postgresql (as root), and in the Python environment the cluster extra
# (pip install -e ".[cluster]": submitit, psycopg). Runs as root (the daemons' users are root and postgres).
# State lives in BVR_CLUSTER_DIR (default /tmp/bvr-cluster): slurm.conf, spool and logs, the database, artifacts.
set -euo pipefail

DIR="${BVR_CLUSTER_DIR:-/tmp/bvr-cluster}"
PG_PORT="${BVR_PG_PORT:-55432}"
MLFLOW_PORT="${BVR_MLFLOW_PORT:-5055}"
HOST="$(hostname -s)"
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
PYTHON="${PYTHON:-python}"

say() { printf '%s\n' "$*"; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

need() {
    for tool in munged slurmctld slurmd sbatch; do
        command -v "$tool" >/dev/null || die "$tool not found: apt-get install slurm-wlm munge postgresql"
    done
    [ -n "$PG_BIN" ] || die "PostgreSQL not found: apt-get install postgresql"
    [ "$(id -u)" = 0 ] || die "run as root (the daemons need it)"
    "$PYTHON" -c "import mlflow, psycopg" 2>/dev/null ||
        die "$PYTHON lacks mlflow or psycopg: pip install -e \".[cluster]\" in bvr's environment"
}

slurm_conf() {
    local cpus mem
    cpus="$(nproc)"
    mem="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
    mkdir -p "$DIR/slurm/state" "$DIR/slurm/spool" "$DIR/slurm/log"
    cat > "$DIR/slurm/slurm.conf" <<EOF
ClusterName=bvr
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/slurm/state
SlurmdSpoolDir=$DIR/slurm/spool
SlurmctldPidFile=$DIR/slurm/slurmctld.pid
SlurmdPidFile=$DIR/slurm/slurmd.pid
SlurmctldLogFile=$DIR/slurm/log/slurmctld.log
SlurmdLogFile=$DIR/slurm/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
KillWait=30
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
}

up_munge() {
    if [ -S /run/munge/munge.socket.2 ] && munge -n >/dev/null 2>&1; then return; fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    [ -f /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- munged
    else
        munged --force
    fi
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && return; sleep 0.1; done
    die "munged did not start (see /var/log/munge/munged.log)"
}

up_slurm() {
    export SLURM_CONF="$DIR/slurm/slurm.conf"
    slurm_conf
    pgrep -x slurmctld >/dev/null || slurmctld -f "$SLURM_CONF"
    pgrep -x slurmd >/dev/null || slurmd -f "$SLURM_CONF"
    for _ in $(seq 100); do
        if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then return; fi
        scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
        sleep 0.2
    done
    die "the SLURM node did not come up (see $DIR/slurm/log/)"
}

pg() { runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }

up_postgres() {
    local data="$DIR/postgres"
    if [ ! -f "$data/PG_VERSION" ]; then
        mkdir -p "$data" && chown postgres:postgres "$data"
        pg initdb -D "$data" -U postgres --auth=trust >/dev/null
    fi
    chown postgres:postgres "$DIR"/postgres
    if ! pg pg_ctl -D "$data" status >/dev/null 2>&1; then
        pg pg_ctl -D "$data" -l "$data/server.log" -w \
            -o "-p $PG_PORT -k $data -c listen_addresses=127.0.0.1" start >/dev/null
    fi
    if ! pg psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "select 1 from pg_database where datname='mlflow'" |
            grep -q 1; then
        pg createdb -h 127.0.0.1 -p "$PG_PORT" -U postgres mlflow
    fi
}

up_mlflow() {
    local url="http://127.0.0.1:$MLFLOW_PORT"
    if curl -sf "$url/health" >/dev/null 2>&1; then return; fi
    mkdir -p "$DIR/artifacts" "$DIR/mlflow"
    nohup "$PYTHON" -m mlflow server --backend-store-uri "postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/mlflow" \
        --artifacts-destination "$DIR/artifacts" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
        > "$DIR/mlflow/server.log" 2>&1 &
    echo $! > "$DIR/mlflow/server.pid"
    for _ in $(seq 300); do curl -sf "$url/health" >/dev/null 2>&1 && return; sleep 0.2; done
    die "the MLflow server did not answer at $url (see $DIR/mlflow/server.log)"
}

exports() {
    say "export SLURM_CONF=$DIR/slurm/slurm.conf"
    say "export MLFLOW_TRACKING_URI=http://127.0.0.1:$MLFLOW_PORT"
}

case "${1:-}" in
    up)
        need
        start=$(date +%s)
        up_munge; up_slurm; up_postgres; up_mlflow
        say "cluster up in $(( $(date +%s) - start )) s: SLURM partition debug ($(nproc) CPUs on $HOST)," \
            "PostgreSQL on 127.0.0.1:$PG_PORT, MLflow at http://127.0.0.1:$MLFLOW_PORT"
        exports
        ;;
    check)
        export SLURM_CONF="$DIR/slurm/slurm.conf"
        out="$DIR/check-%j.out"
        job=$(sbatch --parsable --wait -o "$out" --wrap 'echo "ran on $(hostname -s)"')
        say "job $job: $(cat "${out/\%j/$job}")"
        curl -sf -X POST -H 'Content-Type: application/json' -d '{"max_results": 1}' \
            "http://127.0.0.1:$MLFLOW_PORT/api/2.0/mlflow/experiments/search" >/dev/null &&
            say "MLflow answers at http://127.0.0.1:$MLFLOW_PORT"
        ;;
    down)
        [ -f "$DIR/mlflow/server.pid" ] && kill "$(cat "$DIR/mlflow/server.pid")" 2>/dev/null || true
        pkill -x slurmd || true
        pkill -x slurmctld || true
        [ -n "$PG_BIN" ] && [ -f "$DIR/postgres/PG_VERSION" ] && pg pg_ctl -D "$DIR/postgres" -m fast stop >/dev/null 2>&1 || true
        say "cluster down (state kept in $DIR)"
        ;;
    env)
        exports
        ;;
    *)
        die "usage: bash scripts/cluster.sh up|check|down|env"
        ;;
esac
