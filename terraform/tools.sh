#!/usr/bin/env bash
# Builds what Terraform needs to use Meridian's provider on this machine, from source:
#   - the provider (terraform/provider), with Go from the machine's toolchain and its
#     modules from the Go module proxy, into a filesystem mirror that OpenTofu and
#     Terraform install it from, and a CLI configuration naming that mirror;
#   - the CLI itself when none is installed: `tofu` from PATH if there is one, else
#     OpenTofu built from its Go module (the release binaries are not reachable here).
# Outputs go under $MERIDIAN_SERVICES_DIR/terraform (default .services/terraform),
# keyed by version, so later runs only rebuild what changed. Prints where they are as
# KEY=VALUE lines: TOFU, PROVIDER, TF_CLI_CONFIG_FILE, PROVIDER_VERSION.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${MERIDIAN_SERVICES_DIR:-$ROOT/.services}/terraform
TOFU_VERSION=1.10.6
TOFU_MODULE=github.com/opentofu/opentofu
PROVIDER_VERSION=0.1.0
# Both registries' names for the provider, so `source = "meridian/meridian"` resolves
# from the mirror whichever CLI reads it.
PROVIDER_HOSTS=(registry.opentofu.org registry.terraform.io)

log() { echo "==> $*" >&2; }

command -v go >/dev/null || { echo "Go is needed to build the provider (go.dev)" >&2; exit 2; }
mkdir -p "$OUT"
# One build at a time: `./dev test` starts one in the background and the tests ask again,
# waiting here for it to finish rather than building twice.
exec 9>"$OUT/.lock"
flock 9
platform="$(go env GOOS)_$(go env GOARCH)"

build_provider() {
  local binary="$OUT/provider/terraform-provider-meridian_v$PROVIDER_VERSION"
  log "building the Meridian provider $PROVIDER_VERSION (terraform/provider)"
  mkdir -p "$OUT/provider"
  (cd "$ROOT/terraform/provider" && go build -trimpath \
    -ldflags "-X main.version=$PROVIDER_VERSION" -o "$binary.new" .)
  mv "$binary.new" "$binary"
  local host folder
  for host in "${PROVIDER_HOSTS[@]}"; do
    folder="$OUT/mirror/$host/meridian/meridian/$PROVIDER_VERSION/$platform"
    mkdir -p "$folder"
    cp "$binary" "$folder/terraform-provider-meridian_v$PROVIDER_VERSION"
  done
  # Only the mirror for meridian/*: every other provider comes from its registry as usual.
  cat > "$OUT/cli.tfrc" <<TFRC
provider_installation {
  filesystem_mirror {
    path    = "$OUT/mirror"
    include = ["registry.opentofu.org/meridian/*", "registry.terraform.io/meridian/*"]
  }
  direct {
    exclude = ["registry.opentofu.org/meridian/*", "registry.terraform.io/meridian/*"]
  }
}
TFRC
  echo "$binary"
}

# OpenTofu's go.mod has replace directives, which `go install module@version` refuses:
# the module is downloaded, copied and built inside the copy.
build_tofu() {
  local binary="$OUT/opentofu-$TOFU_VERSION/tofu"
  if [ -x "$binary" ]; then
    echo "$binary"
    return
  fi
  log "building OpenTofu $TOFU_VERSION from its Go module (a few minutes, once)"
  local source
  source=$(go mod download -json "$TOFU_MODULE@v$TOFU_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  [ -d "$source" ] || { echo "go mod download $TOFU_MODULE@v$TOFU_VERSION failed" >&2; exit 1; }
  local work="$OUT/opentofu-$TOFU_VERSION.src"
  rm -rf "$work"
  cp -r "$source" "$work"
  chmod -R u+w "$work"
  mkdir -p "$(dirname "$binary")"
  (cd "$work" && go build -trimpath -ldflags "-X $TOFU_MODULE/version.dev=no" \
    -o "$binary.new" ./cmd/tofu)
  mv "$binary.new" "$binary"
  rm -rf "$work"
  echo "$binary"
}

provider=$(build_provider)
tofu=$(command -v tofu || build_tofu)
echo "TOFU=$tofu"
echo "PROVIDER=$provider"
echo "PROVIDER_VERSION=$PROVIDER_VERSION"
echo "TF_CLI_CONFIG_FILE=$OUT/cli.tfrc"
