# apt_install.sh — sourced by the scripts that install Debian packages they find missing:
#   apt_install WHO PACKAGE...   says "WHO: installing PACKAGE..." on stderr, then apt-get update and install
#                                (no recommends, non-interactive; through sudo unless root)
apt_install() {
  local who=$1 sudo=""
  shift
  echo "$who: installing $*" >&2
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
