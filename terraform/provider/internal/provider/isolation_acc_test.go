package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// TestAccTenantIsolation: a tenant's credentials (its tenant-admin service account,
// by client credentials) manage its own resources and cannot read, import, change or
// even find another tenant's.
func TestAccTenantIsolation(t *testing.T) {
	env := testAccEnv(t)
	mine := env.testTenant(t)
	theirs := env.testTenant(t)
	clientID, secret := env.serviceAccount(t, mine, "terraform", "tenant-admin")
	env.serviceAccount(t, theirs, "owner", "tenant-admin")
	admin := env.admin(t)
	theirTopic := theirs + ".secret"
	if err := admin.Post(t.Context(), "topics", map[string]any{"tenant": theirs, "name": "secret", "partitions": 1}, nil); err != nil {
		t.Fatal(err)
	}
	provider := env.credentialsProvider(clientID, secret)
	mineHCL := provider + fmt.Sprintf(`
resource "meridian_topic" "mine" {
  provider   = meridian.tenant
  name       = "events"
  partitions = 1
}

data "meridian_topics" "visible" {
  provider   = meridian.tenant
  depends_on = [meridian_topic.mine]
}
`)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			if err := env.expectGone(t, "topics/"+escape(mine+".events"), nil); err != nil {
				return err
			}
			// Their topic is still there, untouched.
			var topic topicJSON
			return env.apiGet(t, "topics/"+escape(theirTopic), nil, &topic)
		},
		Steps: []resource.TestStep{
			{
				// Its own: created in its only tenant; the list holds its topics only.
				Config: mineHCL,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_topic.mine", "tenant", mine),
					resource.TestCheckResourceAttr("data.meridian_topics.visible", "names.#", "1"),
					resource.TestCheckResourceAttr("data.meridian_topics.visible", "names.0", mine+".events"),
				),
			},
			{
				// Another tenant's topic does not exist for it: importing fails.
				Config:        mineHCL + "\nresource \"meridian_topic\" \"theirs\" {\n  provider = meridian.tenant\n  name = \"secret\"\n  partitions = 1\n}\n",
				ResourceName:  "meridian_topic.theirs",
				ImportState:   true,
				ImportStateId: theirTopic,
				ExpectError:   regexp.MustCompile(`(?i)cannot import non-existent remote object|not found`),
			},
			{
				// Nor can it create, grant or read in the other tenant.
				Config: mineHCL + fmt.Sprintf(`
resource "meridian_topic" "intruder" {
  provider   = meridian.tenant
  tenant     = %[1]q
  name       = "intruder"
  partitions = 1
}
`, theirs),
				ExpectError: regexp.MustCompile(fmt.Sprintf(`tenant '%s' not found`, theirs)),
			},
			{
				Config: mineHCL + fmt.Sprintf(`
resource "meridian_topic_acl" "intruder" {
  provider   = meridian.tenant
  topic      = %[1]q
  principal  = %[2]q
  operations = ["consume"]
}
`, theirTopic, clientID),
				ExpectError: regexp.MustCompile(fmt.Sprintf(`tenant '%s' not found`, theirs)),
			},
			{
				Config: mineHCL + fmt.Sprintf(`
data "meridian_topics" "theirs" {
  provider = meridian.tenant
  tenant   = %[1]q
}
`, theirs),
				Check: resource.TestCheckResourceAttr("data.meridian_topics.theirs", "names.#", "0"),
			},
		},
	})
}

// TestAccWrongCredentialsKeepTheState: the API answers 404 for another tenant's objects,
// so a run with another tenant's credentials cannot tell them from deleted ones; the
// provider refuses to forget them rather than drop every resource from the state.
func TestAccWrongCredentialsKeepTheState(t *testing.T) {
	env := testAccEnv(t)
	mine := env.testTenant(t)
	theirs := env.testTenant(t)
	clientID, secret := env.serviceAccount(t, theirs, "terraform", "tenant-admin")
	resources := fmt.Sprintf(`
resource "meridian_topic" "kept" {
  tenant     = %[1]q
  name       = "kept"
  partitions = 1
}

resource "meridian_databus_config" "kept" {
  tenant   = %[1]q
  name     = "kept"
  document = jsonencode({ streams = { events = { topic = meridian_topic.kept.full_name } } })
}
`, mine)
	wrong := fmt.Sprintf("provider \"meridian\" {\n  endpoint      = %q\n  client_id     = %q\n  client_secret = %q\n}\n",
		env.endpoint, clientID, secret)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			return env.expectGone(t, "topics/"+escape(mine+".kept"), nil)
		},
		Steps: []resource.TestStep{
			{Config: env.adminProvider() + resources},
			{
				Config:      wrong + resources,
				ExpectError: regexp.MustCompile(fmt.Sprintf(`are not of tenant "%s"`, mine)),
			},
			// Both are still in the state, unchanged: nothing to create.
			{Config: env.adminProvider() + resources, PlanOnly: true},
		},
	})
}
