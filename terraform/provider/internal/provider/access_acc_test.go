package provider

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

func accessHCL(env accEnv, tenant, role string, operations string) string {
	return env.adminProvider() + fmt.Sprintf(`
resource "meridian_topic" "t" {
  tenant     = %[1]q
  name       = "payments"
  partitions = 1
}

resource "meridian_service_account" "app" {
  tenant      = %[1]q
  name        = "payments-app"
  role        = %[2]q
  description = "writes payments"
}

resource "meridian_topic_acl" "app" {
  topic      = meridian_topic.t.full_name
  principal  = meridian_service_account.app.client_id
  operations = [%[3]s]
}
`, tenant, role, operations)
}

// secretWorks checks the secret in the state is the account's: the token endpoint
// accepts it.
func secretWorks(env accEnv) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		account := s.RootModule().Resources["meridian_service_account.app"].Primary.Attributes
		if account["client_secret"] == "" {
			return fmt.Errorf("no client_secret in the state")
		}
		return env.tokenFor(account["client_id"], account["client_secret"])
	}
}

// aclHas checks the API's view of the ACL entries of the topic.
func aclHas(t *testing.T, env accEnv, topic, principal string, operations ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		acls, err := List[topicACLJSON](context.Background(), env.admin(t), "topic-acls", url.Values{"topic": {topic}})
		if err != nil {
			return err
		}
		if len(acls) == 1 {
			sort.Strings(acls[0].Operations)
		}
		if len(acls) != 1 || acls[0].Principal != principal || fmt.Sprint(acls[0].Operations) != fmt.Sprint(operations) {
			return fmt.Errorf("API has ACLs %+v on %s; want one for %s with %v", acls, topic, principal, operations)
		}
		return nil
	}
}

// TestAccServiceAccountAndACL: a service account (its secret kept, sensitive, and
// working), an ACL entry naming it, both changed in place, drift of the ACL from the
// API, imports (the account by its client id, the entry by its id), destroy.
func TestAccServiceAccountAndACL(t *testing.T) {
	env := testAccEnv(t)
	tenant := env.testTenant(t)
	topic := tenant + ".payments"
	clientID := tenant + "--payments-app"
	admin := env.admin(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			accounts, err := List[serviceAccountJSON](context.Background(), admin, "service-accounts", url.Values{"tenant": {tenant}})
			if err != nil {
				return err
			}
			if len(accounts) != 0 {
				return fmt.Errorf("service accounts left: %+v", accounts)
			}
			return env.expectGone(t, "topics/"+escape(topic), nil)
		},
		Steps: []resource.TestStep{
			{
				Config: accessHCL(env, tenant, "developer", `"produce"`),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_service_account.app", "client_id", clientID),
					resource.TestCheckResourceAttr("meridian_topic_acl.app", "principal", clientID),
					resource.TestCheckResourceAttr("meridian_topic_acl.app", "tenant", tenant),
					secretWorks(env),
					aclHas(t, env, topic, clientID, "produce"),
				),
			},
			{
				Config: accessHCL(env, tenant, "viewer", `"produce", "consume"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_service_account.app", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("meridian_topic_acl.app", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("meridian_topic.t", plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_service_account.app", "role", "viewer"),
					secretWorks(env), // the secret set at creation is still the one
					aclHas(t, env, topic, clientID, "consume", "produce"),
				),
			},
			{
				// Drift: the entry changed through the API is put back.
				PreConfig: func() {
					acls, err := List[topicACLJSON](context.Background(), admin, "topic-acls", url.Values{"topic": {topic}})
					if err != nil || len(acls) != 1 {
						t.Fatalf("ACLs of %s: %v %v", topic, acls, err)
					}
					body := map[string]any{"operations": []string{"admin"}}
					if err := admin.Patch(context.Background(), fmt.Sprintf("topic-acls/%d", acls[0].ID), nil, body, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: accessHCL(env, tenant, "viewer", `"produce", "consume"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic_acl.app", plancheck.ResourceActionUpdate),
				}},
				Check: aclHas(t, env, topic, clientID, "consume", "produce"),
			},
			{
				ResourceName:            "meridian_service_account.app",
				ImportState:             true,
				ImportStateId:           clientID,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"client_secret"}, // shown once, never read back
			},
			{
				ResourceName:      "meridian_topic_acl.app",
				ImportState:       true,
				ImportStateVerify: true,
			},
			{
				// A refusal naming a field (a principal of another tenant) points at it.
				Config: accessHCL(env, tenant, "viewer", `"produce", "consume"`) + `
resource "meridian_topic_acl" "stranger" {
  topic      = meridian_topic.t.full_name
  principal  = "other--someone"
  operations = ["consume"]
}
`,
				ExpectError: regexp.MustCompile(`(?s)principal\s+=\s+"other--someone".*principal:`),
			},
		},
	})
}
